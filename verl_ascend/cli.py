"""``verl-ascend``: the one command. Every subcommand a user runs is listed in ``commands()``.

Why one console script: module paths are not an interface (scripts written against
``python -m verl.ascend.stack`` broke when the module moved); a subcommand name is. Each row names
the function that runs it as ``module:function`` and is imported only when that subcommand runs, so
``verl-ascend --help`` stays instant and this neutral module imports no backend and no recipe: the
homes own their commands, this table only lists them.

Every target takes ``argv`` (the arguments after the subcommand) and returns an exit status from the
one table (``verl_ascend.checks.exits``: 0 accepted, 2 refused, 1 the command itself failed).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

PROG = "verl-ascend"


@dataclass(frozen=True)
class Command:
    name: str
    target: str  # "module:function", called with argv (list[str]) and returning an exit status
    summary: str


def commands() -> tuple[Command, ...]:
    """Every subcommand, in the order ``--help`` lists them."""
    return (
        Command("train", "verl_ascend.launch:train", "train with the installed recipe (Hydra overrides appended)"),
        Command("doctor", "verl_ascend.launch.commands:doctor", "check a config: every finding and the verdict"),
        Command("dry-run", "verl_ascend.launch.commands:dry_run_cli", "print the composed config, effective settings, env and verdict"),
        Command("env", "verl.ascend.env.__main__:main", "print the NPU runtime-environment profile as shell lines"),
        Command("stack-gate", "verl.ascend.env.stack_gate:main", "check this host's NPU software stack against the pins"),
        Command("accept", "verl.ascend.accept.cli:main", "acceptance run of a host: stack, fused ops, a short DAPO run"),
        Command("report", "verl_ascend.report.report:main", "report of a run: metrics, profiles, checklist, plots"),
        Command("parse-traces", "verl_ascend.report.offline:main", "re-parse raw Ascend profiler folders (NPU host)"),
        Command("gate", "verl_ascend.report.gate:main", "regression gate: a run's metrics against a baseline"),
        Command("seams", "verl_ascend.seams.__main__:main", "every contact with upstream code and its status"),
        Command("keys", "verl_ascend.sections:main", "the config keys verl-ascend declares"),
        Command("envs", "verl_ascend.envs:main", "the environment variables verl-ascend reads"),
        Command("data", "recipe.dapo_ascend.data.prepare:main", "prepare a dataset as checked parquet rows"),
        Command("assets", "recipe.dapo_ascend.tiny.assets:main", "build the tiny model, tokenizer and task for the CPU demo"),
        Command("plot", "recipe.dapo_ascend.tiny.plot:main", "plot a run's metrics file"),
    )


def usage() -> str:
    rows = commands()
    width = max(len(c.name) for c in rows)
    lines = [f"usage: {PROG} <command> [args...]   ({PROG} <command> --help for each)", "", "commands:"]
    lines += [f"  {c.name:<{width}}  {c.summary}" for c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    by_name = {c.name: c for c in commands()}
    command = by_name.get(argv[0])
    if command is None:
        print(f"{PROG}: unknown command {argv[0]!r}; accepted: {', '.join(by_name)}", file=sys.stderr)
        return 2
    module, _, function = command.target.partition(":")
    run = getattr(importlib.import_module(module), function)
    return int(run(argv[1:]) or 0)


def entry() -> None:
    """The console script."""
    sys.exit(main())
