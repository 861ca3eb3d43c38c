"""``verl-ascend doctor``, ``verl-ascend dry-run`` and ``verl-ascend memory``: judge a recipe's config and start nothing.

``memory`` prints the memory plan (``verl_ascend.memory``) the doctor's ``memory_exceeds_device`` rule judges,
with its table, plot, JSON and advice.

Why here: both run the one validation pipeline (``verl_ascend.checks.validate``) on a config the
installed recipe composes (``verl_ascend.launch.Recipe``), and a second recipe gets them unchanged. They
reach the launch's verdict on the same config (the launch adds the rules that read the run's files);
the dry run also prints what the job would run with, from the same composed config: the whole config
with interpolations resolved, the effective settings where upstream consumes them (given the device's
env profile), what the device adds to each process (``DeviceHooks.dry_run_lines``: on an NPU the env
profile per role and the pools), then the findings. Neither imports Ray-starting code or touches a device, so both run on any CPU
machine (and in CI). Without ``--config-name`` both compose the recipe's default config, the one
``verl-ascend train`` runs (the DAPO recipe's: the CPU demo ``dapo_tiny_cpu``).

Exit status, the checks' one table (``verl_ascend.checks.exits``): 0 accepted, 2 refused (a blocking
finding, a config that cannot be composed), 1 the command itself failed.
``VERL_ASCEND_DOCTOR_STRICT=1`` (or ``doctor.strict``, or the doctor's ``--strict``) makes warnings refuse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from omegaconf import DictConfig, OmegaConf

from verl_ascend import checks
from verl_ascend.checks.exits import FAILED, OK, REFUSED

EXAMPLES = {  # beside each row's own example in verl_ascend/cli.py
    "doctor": "verl-ascend doctor --config-name dapo_demo_cpu --strict",
    "dry-run": "verl-ascend dry-run --config-name dapo_qwen25_32b_npu trainer.nnodes=16",
}


def _parser(command: str, description: str, recipe, examples: Sequence[str] | None = None) -> argparse.ArgumentParser:
    from verl_ascend.cli import parser as cli_parser

    if examples is None:  # the checks' commands: their verdict reads the strict and ignore switches
        description += (f"\n{checks.STRICT_ENV}=1 makes warnings refuse; {checks.IGNORE_ENV}=rule_a,rule_b downgrades "
                        "those rules to notes.")
    parser = cli_parser(command, description, [EXAMPLES[command]] if examples is None else examples)
    parser.add_argument("--config-name", default=recipe.default_config,
                        help=f"recipe config to compose (default {recipe.default_config}, the one train runs)")
    parser.add_argument("--config-dir", default=None, help="folder holding the config (default: the recipe's config/)")
    parser.add_argument("overrides", nargs="*", help="upstream-style Hydra overrides, e.g. data.max_response_length=1234")
    return parser


def _compose(args) -> DictConfig | None:
    """The config the arguments name; None once the error of one that does not compose is printed."""
    from verl_ascend.run.config_utils import ConfigError, compose

    try:
        return compose(args.config_name, args.overrides, args.config_dir)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _parsed(parser: argparse.ArgumentParser, argv, recipe):
    """(arguments, the config they name or None once its refusal is printed)."""
    args = parser.parse_args(argv)
    args.config_dir = args.config_dir or recipe.config_dir
    return args, _compose(args)


def _recipe(recipe):
    from verl_ascend.launch.recipe import registered_recipe

    return recipe or registered_recipe()


def doctor(argv: Sequence[str] | None = None, recipe=None) -> int:
    """``verl-ascend doctor [--config-name NAME] [--config-dir DIR] [--strict] [overrides...]``."""
    recipe = _recipe(recipe)
    parser = _parser("doctor", "Check a config: every finding of the checks and the verdict; starts nothing.", recipe)
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")
    args, config = _parsed(parser, argv, recipe)
    if config is None:
        return REFUSED
    try:
        strict = args.strict or checks.strict_of(config)
    except ValueError as exc:  # an unreadable VERL_ASCEND_DOCTOR_STRICT / doctor.strict
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    findings = checks.validate(config)
    print(checks.format_report(findings, strict))
    return _verdict(findings, strict)


def dry_run_cli(argv: Sequence[str] | None = None, recipe=None) -> int:
    """``verl-ascend dry-run [--config-name NAME] [overrides...]``: what ``DRY_RUN=1 verl-ascend train`` prints."""
    recipe = _recipe(recipe)
    parser = _parser("dry-run", "Print the composed config, effective settings, device environment and the checks' "
                     "verdict; starts nothing.", recipe)
    _, config = _parsed(parser, argv, recipe)
    return REFUSED if config is None else dry_run(config)


def dry_run(config: DictConfig, environ: Mapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """Print config, device sections and verdict to ``out``; return the exit status (never starts anything)."""
    from verl_ascend.checks import effective
    from verl_ascend.device import device_hooks

    device = device_hooks(str(OmegaConf.select(config, "trainer.device") or "cpu"))
    environ = dict(os.environ if environ is None else environ)
    out = out or sys.stdout
    with device.evaluated_once():  # the device's sections and the checks read one evaluation
        strict = checks.strict_of(config, environ)
        lines = ["# ===== verl-ascend dry run: composed config (upstream verl 0.9.1 + recipe) =====",
                 render_config(config).rstrip(),
                 "# ===== effective settings (values where upstream verl consumes them) =====",
                 *effective.render(config, device.env_profile(config, environ)),
                 *device.dry_run_lines(config, environ)]
        # printed before the checks run: upstream's validate_config prints to stdout too, and a script that
        # reads the YAML off the top of this output must find it first
        print("\n".join(lines), file=out, flush=True)
        findings = checks.validate(config, environ)
    print("\n".join(memory_lines(config, environ)), file=out, flush=True)
    print("\n".join(["# ===== config doctor =====", checks.format_report(findings, strict),
                     "# dry run: nothing started (no Ray, no devices)"]), file=out, flush=True)
    return _verdict(findings, strict)


def memory_lines(config: DictConfig, environ: Mapping[str, str]) -> list[str]:
    """The dry run's memory section: the plan's table and verdict (the one the checks judged), or why none."""
    from verl_ascend.memory import render
    from verl_ascend.memory.options import MemoryOptions
    from verl_ascend.memory.plan import cached_plan
    from verl_ascend.memory.terms import PlanInputError
    from verl_ascend.sections import SectionError

    head = "# ===== memory plan (verl-ascend memory: --detail, --plot, advice) ====="
    try:
        if not MemoryOptions.from_config(config).check:
            return [head, "memory.check=false: no plan"]
        return [head, *render.report(cached_plan(config, environ))]
    except (PlanInputError, SectionError, ValueError) as exc:
        return [head, f"no plan: {exc}"]
    except Exception as exc:  # noqa: BLE001 -- the checks name it (rule_crashed); the dry run still ends
        return [head, f"no plan: the planner failed ({type(exc).__name__}: {exc})"]


def render_config(config: DictConfig) -> str:
    """The config as YAML, interpolations resolved so overrides show where they land."""
    try:
        return OmegaConf.to_yaml(config, resolve=True)
    except Exception as exc:  # an unresolvable interpolation must not hide the rest
        return f"# (interpolations left unresolved: {exc})\n" + OmegaConf.to_yaml(config, resolve=False)


def _verdict(findings, strict: bool) -> int:
    """``OK``, or ``REFUSED`` with the blocking findings on stderr."""
    refused = checks.refusal(findings, strict)
    if refused is None:
        return OK
    print(str(refused), file=sys.stderr, flush=True)
    return REFUSED


MEMORY_EXAMPLES = ("verl-ascend memory --config-name dapo_qwen25_32b_npu --plot memory.png",
                   "verl-ascend memory --config-name dapo_qwen25_32b_npu actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                   "verl-ascend memory --json - memory.device_gib=32")


def memory(argv: Sequence[str] | None = None, recipe=None) -> int:
    """``verl-ascend memory [--config-name NAME] [--plot PNG] [--json PATH] [overrides...]``: the memory plan
    (``verl_ascend.memory``) of a config, phase by phase: exit 0 fits, 2 does not (or input it cannot use)."""
    from verl_ascend.memory.advice import advise
    from verl_ascend.memory.plan import plan
    from verl_ascend.memory.terms import PlanInputError

    recipe = _recipe(recipe)
    parser = _parser("memory", "The memory plan of a config: per phase and card role what stays resident, what "
                     "the phase adds, its peak against the card, and the verdict; starts nothing.", recipe,
                     MEMORY_EXAMPLES[1:])
    parser.add_argument("--plot", type=Path, default=None, help="write a stacked-bar PNG of the phases here")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the plan as JSON here ('-': stdout)")
    parser.add_argument("--detail", action="store_true", help="list every term with its keys and source")
    parser.add_argument("--no-advice", action="store_true", help="skip the suggestions (each costs a few plans)")
    args, config = _parsed(parser, argv, recipe)
    if config is None:
        return REFUSED
    try:
        result = plan(config)
        advice = [] if args.no_advice else advise(config, result)
    except PlanInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    return _memory_outputs(args, result, advice)


def _memory_outputs(args, result, advice: list[str]) -> int:
    """Print the plan (stderr when the JSON goes to stdout), write the plot and JSON, and return the verdict."""
    from verl_ascend.memory import render
    from verl_ascend.memory.plan import refusal

    lines = [*render.report(result, detail=args.detail), *(f"advice: {line}" for line in advice),
             f"planned in {result.seconds:.1f} s"]
    print("\n".join(lines), file=sys.stderr if args.json == "-" else sys.stdout)
    try:
        if args.plot:
            render.plot(result, args.plot, title=f"{args.config_name}: {'fits' if result.fits else 'does NOT fit'}")
        if args.json:
            text = json.dumps({**render.to_json(result), "advice": advice}, indent=2) + "\n"
            sys.stdout.write(text) if args.json == "-" else Path(args.json).write_text(text)
    except OSError as exc:
        print(f"error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return FAILED
    for why in [refusal(result, phase) for phase in result.over] + [result.kv_short or ""]:
        if why:
            print(f"refused: {why}", file=sys.stderr)
    return OK if result.fits else REFUSED
