"""The report in upstream's asynchronous trainer modes: rollout and training lanes on one time axis,
overlap, idle time per pool, weight-sync time and staleness -- from traces when there are some, from
the metrics alone when not -- and a sync run's report left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, annotation, cpu_op, write_metrics, write_trace

from verl_ascend.report.report import build_report, render_text, write_outputs

S = 1_000_000  # µs per second
DATA = Path(__file__).parent / "data" / "async_run"
SYNC_METRICS = REPO / "tests" / "recipe" / "fixtures" / "dapo_demo_cpu_2steps_metrics.jsonl"


def _window(ts, dur):
    """Kineto's own event: the profiler ran from ts for dur."""
    return {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _separate_async_traces(root: Path) -> Path:
    """One profiled step of 10 s: the rollout pool generates in [1, 4) and [6, 7) s (gaps of 10 and 15 ms
    between its ops are one span; 30 ms is a pause), the actor trains in [3, 6.5) s, the trainer pool's
    hybrid replica sleeps."""
    prof = root / "profile"
    write_trace(prof / "agent_loop_rollout_replica_0" / "hf_rollout_step1_rank0.json", [_window(0, 10 * S)],
                meta={"baseTimeNanoseconds": 0})
    ops = [cpu_op("aten::mm", 1.0 * S, 1.0 * S), cpu_op("aten::mm", 2.01 * S, 0.99 * S),
           cpu_op("aten::mm", 3.015 * S, 0.985 * S), cpu_op("aten::mm", 6.0 * S, 0.5 * S),
           cpu_op("aten::mm", 6.53 * S, 0.47 * S)]
    write_trace(prof / "agent_loop_rollout_replica_1" / "hf_rollout_step1_rank1.json", [_window(0, 10 * S), *ops],
                meta={"baseTimeNanoseconds": 0})
    write_trace(prof / "actor-rollout_actor-update_step2_rank0-of-1_pid7_1.json",
                [annotation("actor_update", 3.0 * S, 3.5 * S), cpu_op("aten::addmm", 3.1 * S, 1.0 * S)],
                meta={"baseTimeNanoseconds": 0})
    return prof


def _metrics(path: Path, marker: bool = True) -> Path:
    steps = {1: {"step": 10.0, "gen": 4.0, "old_log_prob": 1.0, "update_actor": 3.0, "update_weights": 0.5},
             2: {"step": 6.0, "gen": 1.0, "update_actor": 3.0, "update_weights": 0.5}}
    stale = "training/off_policy/trajectory_staleness"
    extra = {1: {f"{stale}/mean": 0.0, f"{stale}/max": 0, f"{stale}_worst/max": 0},
             2: {f"{stale}/mean": 1.0, f"{stale}/max": 1, f"{stale}_worst/max": 2}}
    if marker:
        extra[1].update({"weight_sync/gloo_seconds": 0.1, "weight_sync/gloo_megabytes": 2.0})
        extra[2].update({"weight_sync/gloo_seconds": 0.3, "weight_sync/gloo_megabytes": 2.0})
    return write_metrics(path, steps, extra)


def test_traces_overlap_idle_per_pool(tmp_path):
    report = build_report([_separate_async_traces(tmp_path), _metrics(tmp_path / "metrics.jsonl")])
    a = report.data["async"]
    assert a["mode"] == "separate_async" and a["mode_basis"].startswith("metrics (weight_sync/")
    assert a["basis"] == "traces" and len(a["windows"]) == 1
    lanes = {lane["label"]: lane for lane in a["windows"][0]["lanes"]}
    assert set(lanes) == {"trainer pool / train", "trainer pool / rollout", "rollout pool / rollout"}
    assert lanes["rollout pool / rollout"]["busy_s"] == pytest.approx(3.97)  # [1,4) + [6,6.5) + [6.53,7)
    assert lanes["trainer pool / rollout"]["busy_s"] == 0.0  # asleep: upstream's switch_to_trainer
    assert lanes["trainer pool / train"]["busy_s"] == pytest.approx(3.5)  # the stage annotation, ops or not
    assert a["wall_s"] == pytest.approx(10.0)  # the profiler's window, not the first to last op
    assert a["overlap_s"] == pytest.approx(1.5)  # [3,4) + [6,6.5)
    assert a["overlap_fraction"] == pytest.approx(0.15)
    assert a["pools"]["trainer"]["idle_s"] == pytest.approx(6.5)
    assert a["pools"]["rollout"]["idle_s"] == pytest.approx(6.03)  # the 30 ms pause included
    # Weight sync and staleness come from the metrics in any case.
    ws = a["weight_sync"]
    assert (ws["mean_s"], ws["total_s"], ws["share_of_step"]) == (0.5, 1.0, 0.0625)
    assert ws["engine"]["weight_sync/gloo_seconds"]["mean"] == pytest.approx(0.2) and ws["engine_mb_per_s"] == 10.0
    assert (a["staleness"]["mean"], a["staleness"]["max"], a["staleness"]["worst_max"]) == (0.5, 1, 2)
    text = render_text(report)
    assert "7. Asynchronous modes: rollout and training on one time axis" in text
    assert "rollout pool / rollout" in text and "overlap (both pools busy) 1.500 s = 15.0% of the wall time" in text


def test_run_config_puts_replicas_in_pools(tmp_path):
    prof = _separate_async_traces(tmp_path)
    cfg = tmp_path / "config.yaml"
    # Two trainer ranks: replicas 0 and 1 are the trainer pool's, so replica 1 is not the rollout pool's.
    cfg.write_text("trainer: {nnodes: 1, n_gpus_per_node: 2, v1: {trainer_mode: separate_async}}\n"
                   "actor_rollout_ref: {rollout: {nnodes: 1, n_gpus_per_node: 1, tensor_model_parallel_size: 1}}\n")
    a = build_report([prof], run_configs=[cfg]).data["async"]
    assert a["mode_basis"] == "run config (trainer.v1.trainer_mode)" and a["pools_basis"].startswith("run config")
    labels = [lane["label"] for lane in a["windows"][0]["lanes"]]
    assert labels == ["trainer pool / train", "trainer pool / rollout"]
    assert a["pools"]["trainer"]["busy_s"] == pytest.approx(3.5 + 3.97 - 1.5)  # both roles on one pool


def test_metrics_alone_give_coarse_lanes_and_bounds(tmp_path):
    report = build_report([_metrics(tmp_path / "metrics.jsonl")])
    a = report.data["async"]
    assert a["basis"] == "metrics" and a["wall_s"] == 16.0
    assert [(r["wait_s"], r["train_s"], r["sync_s"], r["rest_s"]) for r in a["per_step"]] == [(4, 4, 0.5, 1.5),
                                                                                             (1, 3, 0.5, 1.5)]
    lanes = {lane["label"]: lane for lane in a["windows"][0]["lanes"]}
    assert lanes["trainer pool / train"]["busy_s"] == 7.0 and lanes["both pools / weight sync"]["busy_s"] == 1.0
    # The rollout pool generated at least while the trainer waited, at most until each weight sync.
    assert lanes["rollout pool / rollout"]["busy_s"] == 5.0 and lanes["rollout pool / rollout"]["maybe_s"] == 10.0
    assert a["overlap_s"] == 0.0 and a["overlap_max_s"] == 7.0 and a["overlap_max_fraction"] == 0.4375
    assert a["pools"]["trainer"] == {"busy_s": 7.0, "sync_s": 1.0, "idle_s": 8.0, "idle_fraction": 0.5}
    rollout = a["pools"]["rollout"]
    assert (rollout["idle_min_s"], rollout["idle_s"]) == (0.0, 10.0)
    text = render_text(report)
    assert "overlap (both pools busy) 0.000 s = 0.0% of the wall time .. at most 7.000 s = 43.8%" in text
    assert "rollout pool idle 0.000 .. 10.000 s (62.5%)" in text


def test_colocate_async_is_one_pool_taking_turns(tmp_path):
    metrics = _metrics(tmp_path / "metrics.jsonl", marker=False)
    assert "async" not in build_report([metrics]).data  # nothing says async: read as sync
    a = build_report([metrics], mode="colocate_async").data["async"]
    assert a["mode_basis"] == "--trainer-mode" and list(a["pools"]) == ["trainer"]
    assert a["overlap_s"] == 0.0 and "overlap_max_s" not in a
    assert a["pools"]["trainer"] == {"busy_s": 12.0, "sync_s": 1.0, "idle_s": 3.0, "idle_fraction": 0.1875}


def test_sync_report_is_unchanged(tmp_path):
    """A sync run: no section 7, no "async" key, no extra plot; the sections are those it always had."""
    report = build_report([SYNC_METRICS])
    assert "async" not in report.data and report.async_view is None
    assert set(report.data) == {"schema", "inputs", "phases", "rollout_tail", "time_split", "top_ops", "checklist",
                                "lanes", "problems"}
    text = render_text(report)
    heads = [line for line in text.splitlines() if line[:2] in {f"{i}." for i in range(1, 10)}]
    assert [h.split(" ", 1)[0] for h in heads] == ["1.", "2.", "3.", "4.", "5.", "6."]
    written = {p.name for p in write_outputs(report, tmp_path / "out")}
    assert "async_timeline.png" not in written and "step_breakdown.png" in written
    # Sync traces (rollout, then training) with a sync run config: still no section.
    prof = tmp_path / "profile"
    write_trace(prof / "agent_loop_rollout_replica_0" / "r.json", [_window(0, 2 * S), cpu_op("aten::mm", 0, 2 * S)],
                meta={"baseTimeNanoseconds": 0})
    write_trace(prof / "actor-rollout_actor-update_step1_rank0_x.json", [annotation("actor_update", 3 * S, S)],
                meta={"baseTimeNanoseconds": 0})
    assert "async" not in build_report([prof, SYNC_METRICS]).data
    cfg = tmp_path / "config.yaml"
    cfg.write_text("trainer: {v1: {trainer_mode: dapo_ascend}}\n")
    assert "async" not in build_report([prof], run_configs=[cfg]).data


# ------------------------------------------------------------------------------ a real run's files
def test_real_separate_async_run(tmp_path):
    """tests/verl_ascend/report/data/async_run: a real profiled separate_async run of the demo on this
    CPU (see its README), shrunk by shrink_async_run.py; the numbers are that run's."""
    report = build_report([DATA / "profile", DATA / "metrics.jsonl"])
    assert not report.problems, report.problems
    a = report.data["async"]
    assert a["mode"] == "separate_async" and a["basis"] == "traces"
    lanes = {lane["label"]: lane for lane in a["windows"][0]["lanes"]}
    assert set(lanes) == {"trainer pool / train", "trainer pool / rollout", "rollout pool / rollout"}
    expected = json.loads((DATA / "expected.json").read_text())
    assert a["wall_s"] == pytest.approx(expected["wall_s"], abs=1e-3)
    assert a["overlap_s"] == pytest.approx(expected["overlap_s"], abs=1e-3)
    for pool in ("trainer", "rollout"):
        assert a["pools"][pool]["idle_s"] == pytest.approx(expected["idle_s"][pool], abs=1e-3)
    assert a["weight_sync"]["mean_s"] == pytest.approx(expected["weight_sync_mean_s"], abs=1e-6)
    assert a["weight_sync"]["engine"]["weight_sync/gloo_tensors"]["mean"] == 27  # the tiny model's state dict
    assert a["staleness"]["max"] == expected["staleness_max"]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "verl_ascend", "report", str(DATA / "profile"), str(DATA / "metrics.jsonl"),
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "rollout pool / rollout" in proc.stdout and "trainer pool / train" in proc.stdout
    assert (out / "async_timeline.png").stat().st_size > 10_000


def test_a_pool_or_role_not_traced_is_said_so(tmp_path):
    """+profile=npu_train in separate_async: only the actor's traces; nothing is claimed about rollout."""
    prof = tmp_path / "profile"
    write_trace(prof / "actor-rollout_actor-update_step2_rank0_x.json", [annotation("actor_update", 0, 2 * S)],
                meta={"baseTimeNanoseconds": 0})
    report = build_report([prof, _metrics(tmp_path / "metrics.jsonl")])
    a = report.data["async"]
    assert a["overlap_s"] is None and list(a["pools"]) == ["trainer"]
    text = render_text(report)
    assert "overlap: n/a -- the traces hold only one role" in text and "rollout pool: not traced" in text
    assert "async_timeline.png" in {p.name for p in write_outputs(report, tmp_path / "out")}
