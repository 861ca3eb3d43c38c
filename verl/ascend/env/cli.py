"""``verl-ascend env [--config-name NAME] [--config-dir DIR] [--json] [hydra overrides...]``.

Composes a recipe's Hydra config with the given overrides (the toolkit's one composer,
``verl_ascend.run.config_utils``; without ``--config-dir``, the folder and base config a recipe
declares through the entry-point group ``verl_ascend.recipes``: ``dapo_base`` of the DAPO recipe),
resolves the NPU runtime-environment profile (:mod:`verl.ascend.env.profile`) against this shell's
environment, and prints one ``VAR=value  # [roles] reason`` line per variable (two when train and
rollout differ). The output is valid shell. Warnings go to stderr.

Exit status, the checks' one table (:mod:`verl_ascend.checks.exits`): 0 ok; 2 refused -- a conflict or
a value the profile does not accept (every one is printed, naming the switches and the rule), a
config that does not compose, a bad argument; 1 the command itself failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verl.ascend.env.profile import evaluate_env_profile
from verl_ascend.checks.exits import OK, REFUSED
from verl_ascend.cli import parser
from verl_ascend.run.config_utils import compose


def _parser() -> argparse.ArgumentParser:
    p = parser(
        "env",
        "Print the NPU runtime-environment profile (one VAR=value line per variable, with its reason).",
        [
            "verl-ascend env --config-name dapo_qwen25_32b_npu trainer.nnodes=2",
            "verl-ascend env --json   # values, reasons and sources",
        ],
    )
    p.add_argument("--config-name", default=None, help="config name (default: the recipe's base config, dapo_base)")
    p.add_argument("--config-dir", type=Path, default=None, help="config folder (default: the recipe's config/)")
    p.add_argument("--json", action="store_true", help="print the whole profile (values, reasons, sources) as JSON")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. actor_rollout_ref.rollout.enforce_eager=True")
    return p


def _config_of(args) -> tuple[str, list[str], Path]:
    """(config name, overrides, folder): what is not given comes from the installed recipe's declaration."""
    if args.config_dir is not None and args.config_name is not None:
        return args.config_name, args.overrides, args.config_dir
    from verl_ascend.launch import registered_recipe

    recipe = registered_recipe()
    return args.config_name or recipe.base_config, args.overrides, args.config_dir or recipe.config_dir


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = compose(*_config_of(args))
    except ValueError as e:  # ConfigError, or not exactly one recipe installed
        print(f"error: {e}", file=sys.stderr)
        return REFUSED
    profile, errors = evaluate_env_profile(config)
    if errors:
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return REFUSED
    for warning in profile.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(profile.as_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(profile.lines()))
    return OK
