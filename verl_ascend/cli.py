"""``verl-ascend``: the one command. Every subcommand a user runs is a row of ``commands()``.

Why one console script: module paths are not an interface (scripts written against
``python -m verl.ascend.stack`` broke when the module moved); a subcommand name is. Each row names
the function that runs it as ``module:function`` and is imported only when that subcommand runs, so
``verl-ascend --help`` stays instant and this neutral module imports no backend and no recipe: the
homes own their commands, this table only lists them. ``python -m verl_ascend <command>`` is the same
command for scripts that have an interpreter but no PATH (``"${PYTHON:-python}" -m verl_ascend train``).

Every target takes ``argv`` (the arguments after the subcommand) and returns an exit status from the
one table (``verl_ascend.checks.exits``: 0 accepted, 2 refused, 1 the command itself failed). Each
builds its parser with :func:`parser`, so ``verl-ascend X --help`` names ``verl-ascend X`` and ends with
examples, the first of them the row's own (the README's and docs' table, :func:`markdown_table`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from verl_ascend.checks import exits

PROG = "verl-ascend"


@dataclass(frozen=True)
class Command:
    name: str
    target: str  # "module:function", called with argv (list[str]) and returning an exit status
    summary: str
    example: str  # what a user types first: the tables' example and the first of the command's --help examples
    refused: str = ""  # what exit 2 (REFUSED) means for this command, besides a bad argument


def commands() -> tuple[Command, ...]:
    """Every subcommand, in the order ``--help`` lists them."""
    return (
        Command("train", "verl_ascend.launch:train", "train with the installed recipe (Hydra overrides appended)",
                "verl-ascend train --config-name dapo_demo_cpu trainer.total_training_steps=5",
                "the launch refused before Ray (the doctor's error findings, the run's files, a run folder "
                "held by a live run): every culprit named"),
        Command("doctor", "verl_ascend.launch.commands:doctor", "check a config: every finding and the verdict",
                "verl-ascend doctor --config-name dapo_qwen25_32b_npu data.max_response_length=8192",
                "an error finding (a warning too under --strict), a config that does not compose or has a key "
                "of the wrong type or range"),
        Command("dry-run", "verl_ascend.launch.commands:dry_run_cli",
                "print the composed config, effective settings, env and verdict",
                "verl-ascend dry-run --config-name dapo_qwen25_32b_npu",
                "the doctor's verdict is no (the same rules), a config that does not compose"),
        Command("env", "verl.ascend.env.cli:main", "print the NPU runtime-environment profile as shell lines",
                "verl-ascend env actor_rollout_ref.rollout.enforce_eager=True",
                "a broken env-profile rule or a value the profile does not accept, a config that does not compose"),
        Command("stack-gate", "verl.ascend.env.stack_gate:main",
                "check this host's NPU software stack against the pins",
                "verl-ascend stack-gate", "an install that does not match the pins (each MISMATCH line)"),
        Command("accept", "verl.ascend.accept.cli:main", "acceptance run of a host: stack, fused ops, a short DAPO run",
                "verl-ascend accept --out outputs/accept/first",
                "a failed acceptance check (one that crashed included, named in accept.txt), a report folder it "
                "cannot write or that holds an earlier run"),
        Command("report", "verl_ascend.report.report:main", "report of a run: metrics, profiles, checklist, plots",
                "verl-ascend report outputs/profile",
                "damaged inputs (the report is written from the rest and names them; nothing under --strict), "
                "or nothing usable to report"),
        Command("parse-traces", "verl_ascend.report.offline:main", "re-parse raw Ascend profiler folders (NPU host)",
                "verl-ascend parse-traces outputs/profile",
                "nothing to parse, or no usable torch_npu here (1: a folder still unparsed afterwards)"),
        Command("gate", "verl_ascend.report.gate:main", "regression gate: a run's metrics against a baseline",
                "verl-ascend gate outputs/dapo_tiny_cpu/metrics.jsonl"
                " --baseline recipe/dapo_ascend/baselines/dapo_demo_cpu.yaml",
                "a regressed gated metric (named in its table), or inputs it cannot compare (named on stderr)"),
        Command("seams", "verl_ascend.seams.cli:main", "every contact with upstream code and its status",
                "verl-ascend seams --strict", "with --strict: a row that is removable or whose target changed"),
        Command("keys", "verl_ascend.sections:main", "the config keys verl-ascend declares", "verl-ascend keys"),
        Command("envs", "verl_ascend.envs:main", "the environment variables verl-ascend reads", "verl-ascend envs"),
        Command("data", "recipe.dapo_ascend.data.prepare:main", "prepare a dataset as checked parquet rows",
                "verl-ascend data aime2024 -i aime_2024_problems.parquet -o ~/data/dapo/aime-2024.parquet",
                "a bad row (each listed; --skip-bad drops them), an input it cannot read, an output it cannot write"),
        Command("assets", "recipe.dapo_ascend.tiny.assets:main",
                "build the tiny model, tokenizer and task for the CPU demo",
                "verl-ascend assets --root ~/.cache/verl-ascend/tiny"),
        Command("plot", "recipe.dapo_ascend.tiny.plot:main", "plot a run's metrics file",
                "verl-ascend plot outputs/dapo_tiny_cpu/metrics.jsonl",
                "a metrics file that is missing or holds no training step"),
        Command("memory", "verl_ascend.launch.commands:memory", "memory plan per phase against the card: table, plot, verdict",
                "verl-ascend memory --config-name dapo_qwen25_32b_npu --plot memory.png",
                "the planned peak of a phase exceeds the card (phase, term and keys named), or input the plan "
                "cannot use (a model without config.json, a device memory of 0 or a string)"),
        Command("cluster", "verl_ascend.cluster.command:main",
                "check every node of the running Ray cluster for a job: stack, devices, env, files, links, a collective",
                "verl-ascend cluster --config-name dapo_qwen25_32b_npu trainer.nnodes=16",
                "a node not ready (each FAIL cell: node, check, expected, fix), no Ray cluster at the address, a "
                "config that does not compose"),
        Command("parity", "verl_ascend.report.parity:main",
                "two arms of runs (>= 3 each) against a non-inferiority margin, with bootstrap intervals",
                "verl-ascend parity --baseline runs/sync/* --candidate runs/async/*"
                " --margin recipe/dapo_ascend/margins/parity_async.yaml",
                "a statistic whose interval's lower bound is below -margin (named with its metric), or runs it "
                "cannot compare (a missing file, fewer than 3 runs an arm, a metric not logged; named on stderr)"),
    )


def command(name: str) -> Command:
    """The row of ``name``; a name not in the table is a KeyError naming the accepted ones."""
    by_name = {c.name: c for c in commands()}
    if name not in by_name:
        raise KeyError(f"{name!r} is not a {PROG} command; accepted: {', '.join(by_name)}")
    return by_name[name]


def parser(name: str, description: str | None = None, examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of ``verl-ascend NAME``. Why here: usage lines and argparse's errors then name the
    command the user typed (not a module path), and every ``--help`` ends the same way: the exit
    statuses and examples that start from the table's own row, so the README and the help cannot differ."""
    return argparse.ArgumentParser(
        prog=f"{PROG} {name}",
        description=description,
        epilog=epilog(command(name), examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def epilog(row: Command, examples: Sequence[str] = ()) -> str:
    refused = f"{row.refused}; a bad argument" if row.refused else "a bad argument"
    status = f"exit status: {exits.OK} ok; {exits.REFUSED} refused: {refused}; {exits.FAILED} the command itself failed"
    lines = [textwrap.fill(status, width=100, subsequent_indent="  "), "", "examples:"]
    return "\n".join(lines + [f"  {line}" for line in (row.example, *examples)])


def usage() -> str:
    rows = commands()
    width = max(len(c.name) for c in rows)
    lines = [f"usage: {PROG} <command> [args...]   ({PROG} <command> --help for each)", "", "commands:"]
    lines += [f"  {c.name:<{width}}  {c.summary}" for c in rows]
    lines += ["", "same command without PATH: python -m verl_ascend <command> [args...]",
              "exit status: 0 ok, 2 refused (a no verdict or bad input, culprits named), 1 the command itself failed"]
    return "\n".join(lines)


def markdown_table(statuses: bool = False) -> str:
    """The README's table of the commands (``verl-ascend --help --markdown``); with ``statuses`` the
    architecture page's, which adds what exit 2 means for each (``--markdown --statuses``)."""
    head = "| command | what it does | example |" + (" exit 2 (refused), besides a bad argument |" if statuses else "")
    rows = [head, "|---" * head.count(" |") + "|"]
    for c in commands():
        row = f"| `{c.name}` | {c.summary} | `{c.example}` |"
        rows.append(row + (f" {c.refused or '-'} |" if statuses else ""))
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(markdown_table("--statuses" in argv[1:]) if "--markdown" in argv[1:] else usage())
        return exits.OK
    try:
        row = command(argv[0])
    except KeyError as e:
        print(f"{PROG}: error: {e.args[0]} (see {PROG} --help)", file=sys.stderr)
        return exits.REFUSED
    module, _, function = row.target.partition(":")
    run = getattr(importlib.import_module(module), function)
    return int(run(argv[1:]) or exits.OK)


def entry() -> None:
    """The console script (and ``python -m verl_ascend``)."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `verl-ascend seams | head`: the reader left early; say so once, not in a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = exits.FAILED
    sys.exit(status)
