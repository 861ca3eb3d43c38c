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


def legacy_moves(overrides: Sequence[str]) -> list[str]:
    """``old -> new`` for each of upstream's old reward keys among ``overrides`` (still in its published
    DAPO scripts): Hydra's own error on one suggests a '+', which composes a key nothing reads."""
    from verl_ascend.checks.rules_reward import LEGACY_SECTIONS, new_home

    keys = (arg.lstrip("+~").split("=", 1)[0] for arg in overrides)
    return [f"{key} -> {new_home(key)}" for key in keys if key.split(".", 1)[0] in LEGACY_SECTIONS]


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
    moves = legacy_moves(overrides)
    if moves:
        hint += "\nUpstream verl 0.9.1 composes its old reward keys but never reads them; their new keys: " + "; ".join(moves)
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
