"""Benchmark: the streaming profile report vs plain ``json.load`` on large Chrome traces.

Why: a full-length rollout trace reaches hundreds of GB; the standard parser holds the whole text and
every event object at once. The report must stream: at 1 GB it must peak under 500 MB of RSS and be no
slower than ``json.load``. This script writes synthetic traces of the sizes asked for (events shaped
like torch.profiler's Kineto output: CPU ops, device kernels on a second process, flow events,
annotations, pretty-printed the same way) and runs, each in its own subprocess so that peak RSS is
that process's alone:

* ``json.load``      -- ``json.load(open(trace))`` and a count of the events;
* ``stream``         -- :func:`verl_ascend.report.chrome_trace.iter_events`, counting events;
* ``report``         -- the full ``verl-ascend report`` (analysis, JSON, plots), as a user runs it
  (``python -m verl_ascend report``). ``verl_ascend`` lives outside upstream's ``verl`` namespace, so
  upstream's ``verl/__init__`` (torch, Ray: ~370 MB, 9 s on an idle 2-core machine) is never imported;
* ``report-core``    -- the same report started through ``-c`` (``main()`` called directly).

Usage::

    python benchmarks/trace_report.py --sizes 64M 256M 1G [--dir /tmp/trace_bench] [--keep]
    python benchmarks/trace_report.py --generate-only 1G --dir /tmp/trace_bench

Figures are printed side by side with the ratios report/json.load. Nothing here is asserted: timing
belongs in benchmarks, not in tests.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CPU_OPS = ["aten::linear", "aten::addmm", "aten::mul", "aten::add", "aten::silu", "aten::cat",
            "aten::softmax", "aten::to", "aten::copy_", "aten::empty", "aten::view", "aten::matmul"]
_KERNELS = ["MatMulV2", "RmsNorm", "SwiGlu", "RotaryMul", "Add", "Mul", "Cast", "FlashAttentionScore",
            "hcom_allReduce__123_0_1", "TransData", "Softmax"]


def parse_size(text: str) -> int:
    """'64M' -> 67108864; accepts K, M, G suffixes (powers of 1024)."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    try:
        return int(float(digits) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: expected a number with an optional K/M/G suffix") from None


def _event(ph, cat, name, pid, tid, ts, dur, args_text):
    return (
        "  {\n"
        f'    "ph": "{ph}", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
        f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n'
        f'    "args": {{\n      {args_text}\n    }}\n'
        "  }"
    )


def write_synthetic_trace(path: str | Path, size_bytes: int, seed: int = 0, gzip_it: bool = False) -> int:
    """Write a Kineto-shaped Chrome trace of about ``size_bytes``; return the number of events.

    One host process runs CPU ops under a per-iteration ``decode_step`` annotation; each op launches a
    kernel on device process 1 (stream 7) tied to it by a flow pair, as torch.profiler writes them.
    Device kernels leave small gaps (host-bound free time) and one all-reduce per iteration.
    """
    rng = random.Random(seed)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    opener = (lambda p: __import__("gzip").open(p, "wt", compresslevel=1)) if gzip_it else (lambda p: open(p, "w"))
    n = 0
    written = 0
    t = 1_000_000.0
    ext = 0
    with opener(tmp) as f:
        head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "displayTimeUnit": "ms",\n'
                '  "baseTimeNanoseconds": 1700000000000000000,\n  "traceEvents": [\n')
        f.write(head)
        written += len(head)
        meta = [
            '  {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}}',
            '  {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Ascend Hardware"}}',
            '  {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "thread 100 (python)"}}',
        ]
        f.write(",\n".join(meta))
        n += len(meta)
        while written < size_bytes:
            parts = []
            step_start = t
            for _ in range(64):
                op = rng.choice(_CPU_OPS)
                dur = rng.uniform(5, 40)
                ext += 1
                parts.append(_event("X", "cpu_op", op, 100, 100, t, dur,
                                    f'"External id": {ext}, "Record function id": 0, "Ev Idx": {ext}'))
                kname = rng.choice(_KERNELS)
                kts = t + dur * 0.5
                kdur = rng.uniform(2, 60)
                parts.append(_event("X", "kernel", kname, 1, 7, kts, kdur,
                                    f'"External id": {ext}, "device": 1, "stream": 7, "correlation": {ext}'))
                parts.append(f'  {{"ph": "s", "id": {ext}, "pid": 100, "tid": 100, "ts": {t:.3f}, '
                             f'"cat": "ac2g", "name": "ac2g"}}')
                parts.append(f'  {{"ph": "f", "id": {ext}, "pid": 1, "tid": 7, "ts": {kts:.3f}, '
                             f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
                t += dur + rng.uniform(0.5, 8)
            parts.append(_event("X", "user_annotation", "decode_step", 100, 100, step_start, t - step_start,
                                f'"External id": {ext + 1}, "Record function id": 0'))
            text = ",\n" + ",\n".join(parts)
            f.write(text)
            written += len(text)
            n += len(parts)
        tail = '\n  ],\n  "traceName": "synthetic"\n}\n'
        f.write(tail)
    os.replace(tmp, path)
    return n


_JSON_LOAD = (
    "import json, sys; d = json.load(open(sys.argv[1])); "
    "print(len(d['traceEvents'] if isinstance(d, dict) else d))"
)
# The report's main() called directly.
_LEAN = (
    "import sys\n"
    "from {module} import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
# The reader alone.
_STREAM = (
    "import sys\n"
    "from verl_ascend.report.chrome_trace import iter_events\n"
    "print(sum(1 for _ in iter_events(sys.argv[1])))\n"
)


def _run_case(kind: str, trace: Path, out_dir: Path) -> tuple[float, float]:
    py = sys.executable
    if kind == "json.load":
        argv = [py, "-c", _JSON_LOAD, str(trace)]
    elif kind == "stream":
        argv = [py, "-c", _STREAM, str(trace)]
    elif kind == "report":
        argv = [py, "-m", "verl_ascend", "report", str(trace), "--out", str(out_dir), "--quiet"]
    else:
        argv = [py, "-c", _LEAN.format(module="verl_ascend.report.report"), str(trace), "--out", str(out_dir),
                "--quiet"]
    with tempfile.TemporaryFile() as errf:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errf, cwd=REPO)
        # wait4 returns this child's own resource usage (ru_maxrss in KiB on Linux).
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    code = proc.returncode
    if code != 0:
        raise RuntimeError(f"{kind} failed ({code}): {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=parse_size, default=[parse_size("64M")],
                    help="trace sizes to generate and measure, e.g. 64M 256M 1G")
    ap.add_argument("--dir", type=Path, default=None, help="where traces are written (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated traces")
    ap.add_argument("--skip-json-load", action="store_true", help="do not run json.load (it needs ~6.5x the file size in RAM)")
    ap.add_argument("--generate-only", type=parse_size, default=None, help="only write one trace of this size")
    args = ap.parse_args(argv)

    work = args.dir or Path(tempfile.mkdtemp(prefix="trace_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.generate_only:
        p = work / f"synthetic_{args.generate_only >> 20}M.json"
        t0 = time.perf_counter()
        n = write_synthetic_trace(p, args.generate_only)
        print(f"wrote {p} ({p.stat().st_size / 2**20:.0f} MiB, {n} events) in {time.perf_counter() - t0:.1f} s")
        return 0

    print(f"{'trace MiB':>9}  {'case':<12}{'time s':>8}{'peak RSS MiB':>14}{'time / json.load':>18}"
          f"{'RSS / json.load':>17}", flush=True)
    try:
        for size in args.sizes:
            trace = work / f"synthetic_{size >> 20}M.json"
            if not trace.exists():
                write_synthetic_trace(trace, size)
            mib = trace.stat().st_size / 2**20
            kinds = (() if args.skip_json_load else ("json.load",)) + ("stream", "report", "report-core")
            base = None
            for kind in kinds:
                wall, peak = _run_case(kind, trace, work / f"report_{size >> 20}M")
                if kind == "json.load":
                    base = (wall, peak)
                ratio_t = f"{wall / base[0]:18.2f}" if base else f"{'':>18}"
                ratio_m = f"{peak / base[1]:17.3f}" if base else f"{'':>17}"
                print(f"{mib:9.0f}  {kind:<12}{wall:8.1f}{peak:14.0f}{ratio_t}{ratio_m}", flush=True)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
