"""``verl-ascend accept``: the first command on a fresh Ascend host, after the install.

Runs, in order, and reports each check with its measured value and verdict:

1. ``stack``: the install's stack gate (``verl-ascend stack-gate``), its verdict and text;
2. ``fused_ops``: each fused op on the device against its CPU reference at the documented tolerances;
3. ``vllm_env``: a real vLLM process reports the profile variables it received;
4. ``dapo``: a 2-step tiny DAPO on one device with the fused ops and the env profile;
5. ``trace``: its profiled step's trace holds RmsNorm, SwiGlu, RotaryMul (and MatmulAllReduce when
   mc2 at rollout TP > 1 is asked for with ``--tp``).

It writes ``accept.json`` and ``accept.txt`` to the folder it prints. Exit status, the checks' one table
(:mod:`verl_ascend.checks.exits`): 0 when no check failed; 2 refused -- a check failed (a check that
crashes is a failed check, named in the report), or bad input (an unknown option, a report folder it
cannot write or that holds an earlier run, a timeout that is not > 0); 1 the command itself failed (a
traceback); 130 interrupted (Ctrl-C, or a launched process stopped by it): no verdict on the host, no
report written. Without a real
``torch_npu`` (a CPU machine, CI) it runs under the NPU emulator and vLLM's CPU build, and the
report marks which parts are device-only and were skipped, and what stood in for them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

from verl_ascend import envs
from verl_ascend.checks.exits import OK, REFUSED
from verl_ascend.cli import parser as cli_parser

from verl.ascend.accept.record import (
    FAIL, INTERRUPTED, SKIPPED, Check, exit_code, metadata, stopped_by_ctrl_c, writable_folder, write_report,
)

CHECKS = ("stack", "fused_ops", "vllm_env", "dapo", "trace")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli_parser("accept", "Acceptance run of an Ascend host (see docs/ascend_tutorial/quick_start.md).", [
        "verl-ascend accept --checks stack,fused_ops   # no DAPO run: seconds",
        "verl-ascend accept --tp 2 --out outputs/accept/tp2   # mc2 at rollout TP 2: checks MatmulAllReduce",
        "verl-ascend accept --trainer-mode separate_async   # + a rollout pool: the weight-sync time per step",
    ])
    parser.add_argument("--out", help="report folder (default outputs/accept/<UTC time>)")
    parser.add_argument("--tiny-dir", default=envs.raw("VERL_ASCEND_TINY_DIR"),
                        help="where the generated tiny model and data live (built if missing)")
    parser.add_argument("--tp", type=int, default=1,
                        help="rollout TP of the DAPO run; > 1 asks for mc2 and checks MatmulAllReduce (needs TP devices)")
    parser.add_argument("--trainer-mode", dest="mode", default="sync", choices=("sync", "separate_async"),
                        help="upstream's trainer mode of the DAPO run; separate_async adds a rollout pool of --tp "
                             "cards and records the HCCL weight-sync time of each step (needs 2 x --tp devices)")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed to each launched process")
    args = parser.parse_args(argv)
    args.checks = [c.strip() for c in args.checks.split(",") if c.strip()]
    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown or not args.checks:
        parser.error(f"--checks: unknown check(s) {', '.join(unknown) or '(none given)'}; accepted: {', '.join(CHECKS)}")
    if "trace" in args.checks and "dapo" not in args.checks:
        parser.error("--checks: trace reads the profiled step of the dapo run; add dapo")
    if args.tp < 1:
        parser.error(f"--tp {args.tp}: the rollout TP is a positive integer")
    if not args.timeout > 0:  # also NaN; 0 or less would stop every launched process at once
        parser.error(f"--timeout {args.timeout:g}: accepted: seconds > 0 allowed to each launched process")
    return args



def stack_check() -> Check:
    from verl.ascend.env import stack_gate

    check = Check("stack", "the stack gate (verl-ascend stack-gate)")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = stack_gate.run()
    check.value = {"exit_status": status, "lines": out.getvalue().splitlines()}
    if status != OK:
        check.fail("the stack gate refused this install (its MISMATCH lines name the culprits)")
    return check


def _device(emulated: bool) -> tuple[object, str]:
    from verl.ascend import emulator

    if emulated and not emulator.install():
        raise RuntimeError("the NPU emulator did not install")
    import torch_npu

    return torch_npu, "cpu" if emulated else "npu"


def _build_tiny(tiny: Path, timeout_s: float) -> None:
    """The recipe's tiny assets (idempotent): a subprocess, as examples/dapo_tiny_cpu.sh builds them.
    A failure here shows in the checks that need them (no model for vLLM, a refused recipe start)."""
    try:
        subprocess.run([sys.executable, "-m", "verl_ascend", "assets", "--root", str(tiny)],
                       stdout=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"[verl-ascend accept] building the tiny assets in {tiny} took over {timeout_s:.0f} s", file=sys.stderr)


def _timed(check_id: str, fn, *args) -> Check:
    """``fn(*args)`` timed; a check that crashes (or a launch that times out) is a failed check, named."""
    start = time.monotonic()
    try:
        check = fn(*args)
    except Exception as e:
        check = Check(check_id, f"{check_id}: the check itself failed")
        check.fail(f"{type(e).__name__}: {e}")
    check.seconds = time.monotonic() - start
    return check


def on_cpu(check: Check) -> Check:
    """On a CPU host a refused stack gate is expected (no NPU set is installed): record, do not fail."""
    if check.id == "stack" and check.verdict == FAIL:
        check.verdict = SKIPPED
        check.device_only.append("the NPU set (torch_npu, CANN, vLLM + vllm-ascend) is installed on Ascend hosts only")
        check.stands_in.append("the gate still ran; its lines and exit status above are recorded, not enforced")
    return check


def run_checks(args: argparse.Namespace, folder: Path, emulated: bool) -> list[Check]:
    from verl.ascend.accept import ops_check, run_check, vllm_env

    checks: list[Check] = []
    if "stack" in args.checks:
        checks.append(_timed("stack", stack_check))
    if "fused_ops" in args.checks:
        checks.append(_timed("fused_ops", lambda: ops_check.run(*_device(emulated), emulated)))
    tiny = Path(args.tiny_dir).expanduser()
    if {"vllm_env", "dapo"} & set(args.checks):
        _build_tiny(tiny, args.timeout)
    if "vllm_env" in args.checks:
        checks.append(_timed("vllm_env", vllm_env.run, tiny / "model", folder, args.tp, emulated, args.timeout))
    if "dapo" in args.checks:
        run_dir = folder / "dapo"
        run_dir.mkdir()
        status = {}

        def dapo() -> Check:
            status["code"] = run_check.launch(run_dir, tiny, emulated, args.tp, args.timeout,
                                              args.mode).returncode
            if stopped_by_ctrl_c(status["code"]):
                raise KeyboardInterrupt  # the user's stop, not the host failing the recipe
            check = run_check.dapo_check(run_dir, status["code"], emulated, args.mode)
            check.value["memory"] = run_check.memory_value(run_dir, tiny, emulated, args.tp)  # planned vs measured
            return check

        checks.append(_timed("dapo", dapo))
        if "trace" in args.checks:
            mc2 = args.tp > 1 and not emulated
            checks.append(_timed("trace", run_check.trace_kernels_check, run_dir, emulated, args.tp, mc2, status.get("code") == 0))
    return [on_cpu(c) for c in checks] if emulated else checks


def main(argv: list[str] | None = None) -> int:
    from verl.ascend import emulator

    args = parse_args(argv)
    emulated = not emulator.real_torch_npu_importable()
    if emulated and args.mode != "sync" and "dapo" in args.checks:
        print(f"verl-ascend accept: error: --trainer-mode {args.mode}: the weight sync it measures is "
              "upstream's HCCL engine between NPU cards, which the emulator does not have; accepted here: "
              "--trainer-mode sync, or --checks without dapo", file=sys.stderr)
        return REFUSED
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        folder = writable_folder(args.out or f"outputs/accept/{stamp}")
        if (folder / "dapo").exists() and "dapo" in args.checks:
            raise ValueError(f"--out {folder}: it already holds an acceptance run (dapo/); give a new folder")
    except ValueError as e:
        print(f"verl-ascend accept: error: {e}", file=sys.stderr)
        return REFUSED
    mode = "CPU: NPU emulator and vLLM's CPU build" if emulated else "Ascend NPU"
    print(f"[verl-ascend accept] {mode}; report folder: {folder}", flush=True)
    try:
        checks = run_checks(args, folder, emulated)
    except KeyboardInterrupt:
        print(f"[verl-ascend accept] interrupted: no verdict on this host and no report; {folder} keeps what ran. "
              "Run `verl-ascend accept` again (with another --out, or none) for a verdict", file=sys.stderr, flush=True)
        return INTERRUPTED
    json_path, text_path, text = write_report(folder, checks, metadata(mode))
    print(text, end="")
    print(f"[verl-ascend accept] report: {json_path} and {text_path}", flush=True)
    return exit_code(checks)
