"""``python -m verl.ascend.env [--config-name NAME] [hydra overrides...]``: print the env profile.

Composes the recipe's Hydra config (``recipe/dapo_ascend/config/<NAME>.yaml``, default
``dapo_base``) with the given overrides, resolves the NPU runtime-environment profile
(:mod:`verl.ascend.env_profile`) against this shell's environment, and prints one
``VAR=value  # [roles] reason`` line per variable (two when train and rollout differ).
The output is valid shell. Warnings go to stderr.

Exit status: 0 ok; 1 a conflict or a value the profile does not accept (every one is printed,
naming the switches and the rule); 2 a usage or config-composition error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_CONFIG_NAME = "dapo_base"
# Hydra's compose API ignores `hydra.searchpath` written in a config file, so it is passed as
# an override: the primary file's entries plus upstream's trainer configs (``ppo_trainer``).
UPSTREAM_SEARCHPATH = "pkg://verl.trainer.config"


def recipe_config_dir() -> Path:
    """``recipe/dapo_ascend/config`` of the installed (or editable) distribution."""
    import importlib.util

    spec = importlib.util.find_spec("recipe.dapo_ascend")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package recipe.dapo_ascend is not installed; pass --config-dir")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "config"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("recipe.dapo_ascend has no config/ folder; pass --config-dir")


def compose_config(config_name: str, overrides: list[str], config_dir: Path | None = None):
    """Compose ``config_name`` from ``config_dir`` with Hydra ``overrides`` (no Hydra run dir)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = Path(config_dir) if config_dir is not None else recipe_config_dir()
    if not config_dir.is_dir():
        raise FileNotFoundError(f"config dir {config_dir} does not exist")
    if not (config_dir / f"{config_name}.yaml").is_file():
        names = sorted(p.stem for p in config_dir.glob("*.yaml"))
        raise FileNotFoundError(
            f"no config named {config_name!r} in {config_dir}; available: {', '.join(names) or '(none)'}"
        )
    if not any(o.lstrip("+").startswith("hydra.searchpath") for o in overrides):
        import yaml

        primary = yaml.safe_load((config_dir / f"{config_name}.yaml").read_text()) or {}
        paths = list(dict.fromkeys([*(primary.get("hydra", {}) or {}).get("searchpath", []), UPSTREAM_SEARCHPATH]))
        overrides = [f"hydra.searchpath=[{','.join(paths)}]", *overrides]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verl.ascend.env",
        description="Print the NPU runtime-environment profile (one VAR=value line per variable, with its reason).",
    )
    p.add_argument("--config-name", default=DEFAULT_CONFIG_NAME, help="recipe config name (default: %(default)s)")
    p.add_argument("--config-dir", type=Path, default=None, help="config folder (default: recipe/dapo_ascend/config)")
    p.add_argument("--json", action="store_true", help="print the whole profile (values, reasons, sources) as JSON")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. actor_rollout_ref.rollout.enforce_eager=True")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = compose_config(args.config_name, args.overrides, args.config_dir)
    except Exception as e:  # Hydra raises several types for bad overrides / missing configs
        print(f"error: cannot compose config {args.config_name!r}: {e}", file=sys.stderr)
        return 2

    from verl.ascend.env_profile import evaluate_env_profile

    profile, errors = evaluate_env_profile(config)
    if errors:
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return 1
    for warning in profile.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(profile.as_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(profile.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
