"""Fixtures for the profiler tests: Chrome traces with known numbers, torch_npu text-export
directories written from Ascend's documented formats, metrics logs, and real CPU torch.profiler
traces laid out the way upstream verl 0.9.1 writes them."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def kernel(name, ts, dur, pid=1, tid=7, cat="kernel", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def cpu_op(name, ts, dur, pid=100, tid=100):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def annotation(name, ts, dur, pid=100, tid=100):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def process_name(pid, name):
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}


def thread_name(pid, tid, name):
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def write_trace(path: Path, events: list, layout: str = "object", gz: bool = False, meta: dict | None = None,
                indent: int | None = 2) -> Path:
    """A Chrome trace: {"traceEvents": [...], **meta} (torch) or a bare array (torch_npu trace_view)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout == "object":
        doc = {"schemaVersion": 1, **(meta or {}), "traceEvents": events, "traceName": str(path)}
    else:
        doc = events
    text = json.dumps(doc, indent=indent)
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def write_metrics(path: Path, steps: dict[int, dict[str, float]], extra: dict[int, dict] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for step, timing in steps.items():
            data = {f"timing_s/{k}": v for k, v in timing.items()}
            data.update((extra or {}).get(step, {}))
            data["actor/pg_loss"] = 0.1
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


# ------------------------------------------------------------------------------------------ Ascend text export
KERNEL_HEADER = ("Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
                 "Duration(us),Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,Input Shapes,Input Data Types,"
                 "Input Formats,Output Shapes,Output Data Types,Output Formats")
STEP_HEADER = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
               "Communication(Not Overlapped and Exclude Receive),Preparing")
OP_HEADER = ("Name,Input Shapes,Call Stack,Host Self Duration(us),Host Total Duration(us),Device Self Duration(us),"
             "Device Total Duration(us),Device Self Duration With AICore(us),Device Total Duration With AICore(us)")


def kernel_row(name, ktype, start, dur, core="AI_CORE"):
    # torch_npu appends a tab to long numbers so that spreadsheets do not round them.
    return (f'2,0,4294967295,101,2,{name},{ktype},dynamic,{core},{start:.3f}\t,{dur:.3f},0.1,20,0,NO,"""8,128""",'
            f'DT_BF16,ND,"""8,128""",DT_BF16,ND')


def write_ascend_dir(parent: Path, name: str, rank: int, kernels: list[tuple], step_rows: list[tuple] | None = None,
                     ops: list[tuple] | None = None) -> Path:
    """A {worker}_{ts}_ascend_pt directory with the text export of Ascend's documented formats.

    kernels: (name, type, start_us, dur_us[, core]); step_rows: (computing, not_overlapped, overlapped,
    communication, free); ops: (name, host_self_us, device_self_us).
    """
    d = parent / name
    out = d / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (d / f"profiler_info_{rank}.json").write_text(json.dumps({"config": {}, "rank_id": rank}))
    (out / "kernel_details.csv").write_text(
        KERNEL_HEADER + "\n" + "\n".join(kernel_row(*k) for k in kernels) + "\n", encoding="utf-8")
    if step_rows is not None:
        rows = [f"0,{i + 1},{c},{n},{o},{m},{f},{c + n + f},0,{n},10" for i, (c, n, o, m, f) in enumerate(step_rows)]
        (out / "step_trace_time.csv").write_text(STEP_HEADER + "\n" + "\n".join(rows) + "\n")
    if ops is not None:
        rows = [f"{n},,,{h},{h},{dv},{dv},{dv},{dv}" for n, h, dv in ops]
        (out / "operator_details.csv").write_text(OP_HEADER + "\n" + "\n".join(rows) + "\n")
    return d


# ------------------------------------------------------------------------------------------ real CPU traces
_WORKER = HERE / "cpu_trace_worker.py"


@pytest.fixture(scope="session")
def real_cpu_run(tmp_path_factory):
    """A profile directory laid out like upstream verl 0.9.1 writes it, with real torch.profiler traces:

    * training: upstream's own ``get_torch_profiler`` (discrete stages of the actor on rank 0, step 1);
    * rollout: three replicas generating with a tiny model under torch.profiler, started together on
      a barrier: replica 2 (24x more tokens) in a subprocess, concurrently with replicas 0 and 1, which
      run one after the other in this process (one process cannot hold two profilers).
    """
    import torch

    from verl.utils.profiler.config import ProfilerConfig, rollout_trace_dir
    from verl.utils.profiler.torch_profile import get_torch_profiler

    sys.path.insert(0, str(HERE))
    import cpu_trace_worker

    root = tmp_path_factory.mktemp("cpu_run")
    save = root / "profile"
    barrier = root / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cfg = ProfilerConfig(tool="torch", enable=True, save_path=str(save), tool_config=None)
    tokens = {0: 4, 1: 4, 2: 96}
    workers = [subprocess.Popen([sys.executable, str(_WORKER), rollout_trace_dir(cfg, r), str(tokens[r]), str(barrier),
                                 str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (2,)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: no spinning OpenMP workers
    try:
        # Training stages in this process while the workers import torch.
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.SiLU(), torch.nn.Linear(64, 32))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 32)
        for stage, n in {"actor_compute_log_prob": 3, "actor_update": 2}.items():
            prof = get_torch_profiler(contents=["cpu"], save_path=str(save), role=stage,
                                      save_file_prefix="actor_rollout", rank=0, profile_step=1)
            prof.start()
            with torch.profiler.record_function(stage):
                for _ in range(n):
                    if stage == "actor_update":
                        opt.zero_grad()
                        model(x).square().mean().backward()
                        opt.step()
                    else:
                        with torch.no_grad():
                            model(x)
            prof.stop()
        local = {r: cpu_trace_worker.Replica(r) for r in (0, 1)}
        deadline = time.time() + 180
        while sum((Path(rollout_trace_dir(cfg, r)) / "ready").exists() for r in (2,)) < 1:
            if time.time() > deadline or any(w.poll() not in (None, 0) for w in workers):
                raise RuntimeError("rollout workers did not start: " + b"".join(
                    w.stdout.read() or b"" for w in workers if w.poll() is not None).decode())
            time.sleep(0.02)
        barrier.write_text("go")
        for r, replica in local.items():
            replica.run(Path(rollout_trace_dir(cfg, r)), tokens[r])
    finally:
        torch.set_num_threads(threads)
    for w in workers:
        out, _ = w.communicate(timeout=180)
        assert w.returncode == 0, out.decode()
    metrics = write_metrics(root / "metrics.jsonl", {
        1: {"gen": 3.0, "reward": 0.2, "old_log_prob": 0.5, "adv": 0.1, "update_actor": 1.0, "update_weights": 0.2,
            "step": 5.2},
        2: {"gen": 5.0, "reward": 0.2, "old_log_prob": 0.5, "adv": 0.1, "update_actor": 1.0, "update_weights": 0.2,
            "step": 7.2},
    })
    return {"root": root, "save_path": save, "metrics": metrics, "tokens": tokens,
            # Each actor stage call runs the 2-layer MLP once: 3 log-prob forwards + 2 update forwards.
            "train_linear_calls": 2 * (3 + 2),
            # Each generated token runs 3 Linear layers (2 in the block, 1 head).
            "rollout_linear_calls": 3 * sum(tokens.values())}
