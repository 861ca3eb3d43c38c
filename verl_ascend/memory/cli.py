"""``verl-ascend memory``: the memory plan of a recipe config, phase by phase, with its verdict and advice.

Composes the config as ``verl-ascend doctor`` does (the recipe's default ``dapo_tiny_cpu`` without
``--config-name``; upstream-style Hydra overrides appended), starts nothing and touches no device.
Exit status (``verl_ascend.checks.exits``): 0 the plan fits, 2 it does not (the phase, its largest
term and the keys that change it on stderr) or the input cannot be planned (the key or file named),
1 the command itself failed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from verl_ascend.checks.exits import FAILED, OK, REFUSED

EXAMPLES = ("verl-ascend memory --config-name dapo_qwen25_32b_npu --plot memory.png",
            "verl-ascend memory --config-name dapo_qwen25_32b_npu actor_rollout_ref.rollout.tensor_model_parallel_size=4",
            "verl-ascend memory --json - memory.device_gib=32")


def main(argv: Sequence[str] | None = None, recipe=None) -> int:
    from verl_ascend.cli import parser as cli_parser
    from verl_ascend.launch.commands import _compose, _recipe
    from verl_ascend.memory import render
    from verl_ascend.memory.advice import advise
    from verl_ascend.memory.plan import plan, refusal
    from verl_ascend.memory.terms import PlanInputError

    recipe = _recipe(recipe)
    parser = cli_parser("memory", "The memory plan of a config: per phase and card role what stays resident, what "
                        "the phase adds, its peak against the card, and the verdict; starts nothing.", EXAMPLES[1:])
    parser.add_argument("--config-name", default=recipe.default_config,
                        help=f"recipe config to compose (default {recipe.default_config}, the one train runs)")
    parser.add_argument("--config-dir", default=None, help="folder holding the config (default: the recipe's config/)")
    parser.add_argument("--plot", type=Path, default=None, help="write a stacked-bar PNG of the phases here")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the plan as JSON here ('-': stdout)")
    parser.add_argument("--detail", action="store_true", help="list every term with its keys and source")
    parser.add_argument("--no-advice", action="store_true", help="skip the suggestions (each costs a few plans)")
    parser.add_argument("overrides", nargs="*", help="upstream-style Hydra overrides, e.g. memory.device_gib=32")
    args = parser.parse_args(argv)
    args.config_dir = args.config_dir or recipe.config_dir
    config = _compose(args, sys.stderr)
    if config is None:
        return REFUSED
    try:
        result = plan(config)
        advice = [] if args.no_advice else advise(config, result)
    except PlanInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    lines = render.report(result, detail=args.detail)
    lines += [f"advice: {line}" for line in advice]
    lines.append(f"planned in {result.seconds:.1f} s")
    print("\n".join(lines), file=sys.stderr if args.json == "-" else sys.stdout)
    try:
        if args.plot:
            render.plot(result, args.plot, title=f"{args.config_name}: {'fits' if result.fits else 'does NOT fit'}")
        if args.json:
            text = json.dumps({**render.to_json(result), "advice": advice}, indent=2)
            sys.stdout.write(text + "\n") if args.json == "-" else Path(args.json).write_text(text + "\n")
    except OSError as exc:
        print(f"error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return FAILED
    if result.fits:
        return OK
    for phase in result.over:
        print(f"refused: {refusal(result, phase)}", file=sys.stderr)
    return REFUSED
