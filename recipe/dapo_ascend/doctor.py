"""``verl-ascend doctor [--config-name NAME] [--config-dir DIR] [--strict] [overrides...]``

Composes a recipe config the way the entry point would (upstream-style Hydra overrides), reads the
current environment, runs the one validation pipeline (``verl_ascend.checks.validate``: the same rules
and verdict as ``DRY_RUN=1``; the launch adds the rules that read the run's files) and prints every
finding and the verdict. Exit status, the checks' one table (``verl_ascend.checks.exits``): 0 accepted,
2 refused (a blocking finding, a config that cannot be composed or has keys of the wrong type or
range), 1 the command itself failed. Starts nothing and touches no hardware.

The rules are ``verl_ascend.checks``'s, plus those the backends and this recipe register there. This
command lives in the recipe because it composes the recipe's configs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from verl_ascend.checks import IGNORE_ENV, STRICT_ENV, format_report, refusal, strict_of, validate
from verl_ascend.checks.exits import OK, REFUSED
from verl_ascend.cli import parser as cli_parser

DEFAULT_CONFIG = "dapo_qwen25_32b_npu"


def build_parser() -> argparse.ArgumentParser:
    parser = cli_parser(
        "doctor",
        "Check a verl-ascend config for settings that silently do nothing or conflict.\n"
        f"{STRICT_ENV}=1 is the same as --strict; {IGNORE_ENV}=rule_a,rule_b downgrades those rules to notes.",
        ["verl-ascend doctor --config-name dapo_demo_cpu --strict"],
    )
    parser.add_argument(
        "--config-name", default=DEFAULT_CONFIG, help=f"recipe config to compose (default {DEFAULT_CONFIG})"
    )
    parser.add_argument("--config-dir", default=None, help="folder holding the config (default: the recipe's config/)")
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")
    parser.add_argument(
        "overrides", nargs="*", help="upstream-style Hydra overrides, e.g. data.max_response_length=1234"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from recipe.dapo_ascend.config_utils import CONFIG_DIR, ConfigError, compose, legacy_report

    report = legacy_report(args.config_name, args.overrides, args.config_dir or CONFIG_DIR)
    if report is not None:  # upstream's old reward keys: every culprit in one report
        print(report)
        print("error: legacy reward keys (see the report above)", file=sys.stderr)
        return REFUSED

    try:
        config = compose(args.config_name, args.overrides, args.config_dir or CONFIG_DIR)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    from verl_ascend.envs import EnvValueError

    try:
        strict = args.strict or strict_of(config)
    except EnvValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    findings = validate(config)
    print(format_report(findings, strict))
    refused = refusal(findings, strict)
    if refused is None:
        return OK
    print(str(refused), file=sys.stderr)
    return REFUSED
