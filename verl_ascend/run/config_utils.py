"""Compose a recipe's Hydra configs without ``@hydra.main`` (dry run, doctor CLI, tests).

Why not ``@hydra.main`` everywhere: the dry run, the doctor's command line and the tests need the
exact config the entry point would get, from a plain function call, with upstream-style override
strings. Composition goes through Hydra itself, so the recipe YAML is merged onto upstream verl
0.9.1's ``ppo_trainer`` exactly as at run time, and an override of a key that upstream does not
define fails here (Hydra struct mode) with the key named. The config folder is the caller's: the one
a recipe declares (``verl_ascend.launch.Recipe``, found through the entry-point group
``verl_ascend.recipes``), so no backend names a recipe. This is the one composer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

# Upstream's trainer configs (``ppo_trainer``): on the search path of every composition. Hydra reads
# ``hydra.searchpath`` only from a primary config, so a base config (``dapo_base``) gets it as an override.
UPSTREAM_CONFIGS = "pkg://verl.trainer.config"


class ConfigError(ValueError):
    """The config cannot be composed: unknown config name, bad override, missing key."""


def available_configs(config_dir: str | Path) -> list[str]:
    return sorted(p.stem for p in Path(config_dir).glob("*.yaml"))


def compose(config_name: str, overrides: Sequence[str], config_dir: str | Path) -> DictConfig:
    """The config ``config_name`` (a YAML in ``config_dir``) with Hydra ``overrides`` applied.

    Clears Hydra's global state first: call it from plain Python, not inside a running Hydra app.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    config_dir = Path(config_dir).resolve()
    if not (config_dir / f"{config_name}.yaml").is_file():
        available = ", ".join(available_configs(config_dir)) or "none"
        raise ConfigError(f"no config {config_name!r} in {config_dir}; available: {available}")
    legacy = legacy_override_message(overrides)
    if legacy:
        raise ConfigError(legacy)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return hydra_compose(config_name=config_name, overrides=[*_search_path(config_dir / f"{config_name}.yaml", overrides), *overrides])
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc, overrides)) from exc


def _search_path(primary: Path, overrides: Sequence[str]) -> list[str]:
    """The ``hydra.searchpath`` override a config without upstream's configs on its search path needs ([] if none)."""
    import yaml

    if any(o.lstrip("+").startswith("hydra.searchpath") for o in overrides):
        return []
    declared = ((yaml.safe_load(primary.read_text()) or {}).get("hydra") or {}).get("searchpath") or []
    if UPSTREAM_CONFIGS in declared:
        return []
    return [f"hydra.searchpath=[{','.join([*declared, UPSTREAM_CONFIGS])}]"]


def legacy_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(the other overrides, "old -> new" moves)`` for upstream's old reward keys on the command line."""
    from verl_ascend.checks.rules_reward import LEGACY_MOVES  # the reward rules' table: one list of the moves

    kept, moves = [], []
    for arg in overrides:
        key = arg.lstrip("+~").split("=", 1)[0]
        old = next((o for o in sorted(LEGACY_MOVES, key=len, reverse=True) if key == o or key.startswith(o + ".")), None)
        if old is None:
            kept.append(arg)
        else:
            moves.append(f"{key} -> {LEGACY_MOVES[old]}{key[len(old):]}")
    return kept, moves


def legacy_override_message(overrides: Sequence[str]) -> str | None:
    """Upstream's old reward keys on the command line (``reward_model.overlong_buffer.len=...``,
    still in upstream's published DAPO scripts), with where each lives now; None if there are none."""
    _kept, moves = legacy_overrides(overrides)
    if not moves:
        return None
    return (
        "legacy reward keys that upstream verl 0.9.1 no longer reads (they would be silently dropped); "
        "use the new keys instead: " + "; ".join(moves)
    )


def _explain(exc: Exception, overrides: Sequence[str]) -> str:
    message = str(exc).strip()
    cause = exc.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in message:
        message = f"{message}\n{str(cause).strip()}"
    hint = ""
    if "not in struct" in message or "Could not override" in message or "Could not append" in message:
        hint = (
            "\nOverrides use upstream verl 0.9.1's keys (see verl/trainer/config/_generated_ppo_trainer.yaml); "
            "a key upstream does not define needs a leading '+', and is then read by nothing unless our code reads it."
        )
    given = f"\noverrides given: {' '.join(overrides)}" if overrides else ""
    return f"cannot compose the config: {message}{hint}{given}"


def split_argv(argv: Sequence[str], default: str) -> tuple[str, list[str]]:
    """``--config-name NAME`` (or ``--config-name=NAME``, ``-cn``) and the Hydra overrides of ``argv``."""
    name, overrides, args = default, [], iter(argv)
    for arg in args:
        flag, _, value = arg.partition("=")
        if flag in ("--config-name", "-cn"):
            name = value or next(args, default)
        elif flag in ("--config-path", "-cp", "--config-dir", "-cd") and not value:
            next(args, None)  # Hydra's own flags and their values are not overrides
        elif not arg.startswith("-") and not arg.startswith(("hydra.", "hydra/")):
            overrides.append(arg)
    return name, overrides


def legacy_report(config_dir: str | Path, config_name: str, overrides: Sequence[str]) -> str | None:
    """With upstream's old reward keys among ``overrides``: one report of every culprit -- where each
    legacy key lives now, then the checks' findings on the config the other overrides compose -- so a
    user who fixes them does not meet the next refusal on a second try. None without legacy keys."""
    from verl_ascend import checks
    from verl_ascend.checks.findings import ERROR, Finding
    from verl_ascend.checks.pipeline import keys_named

    message = legacy_override_message(overrides)
    if message is None:
        return None
    kept, _moves = legacy_overrides(overrides)
    legacy = Finding("legacy_reward_keys_ignored", ERROR, message, keys_named(message))
    try:
        findings = [legacy, *checks.validate(compose(config_name, kept, config_dir))]
    except ConfigError as exc:  # the rest does not compose either: say so in the same report
        findings = [legacy, Finding("config_not_composed", ERROR, str(exc))]
    return checks.format_report(findings, strict=False)
