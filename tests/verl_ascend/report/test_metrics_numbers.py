"""The report's numbers on traces and logs whose answers are known by construction."""

from __future__ import annotations

import json

import pytest
from conftest import annotation, cpu_op, kernel, process_name, thread_name, write_metrics, write_trace

from verl_ascend.report import analysis, intervals
from verl_ascend.report.lanes import LaneStats, analyze_chrome_trace
from verl_ascend.report.metrics_log import read_metrics_log
from verl_ascend.report.problems import InputFormatError
from verl_ascend.report.report import build_report
from verl_ascend.report.settings import load_settings

S = load_settings()


def _lane(path, kind="train", **kw) -> LaneStats:
    return analyze_chrome_trace(str(path), LaneStats(kind=kind, label=path.stem, source=str(path), fmt="chrome", **kw), S)


def test_interval_union_and_intersection():
    import numpy as np

    b = intervals.merge(np.array([5.0, 0.0, 20.0, 9.0]), np.array([8.0, 6.0, 30.0, 10.0]))
    assert b.starts.tolist() == [0.0, 9.0, 20.0] and b.ends.tolist() == [8.0, 10.0, 30.0]
    assert b.length == 19.0
    other = intervals.merge(np.array([7.0]), np.array([25.0]))
    assert intervals.intersect_length(b, other) == pytest.approx(1 + 1 + 5)
    grid, cum = intervals.busy_curve(b, 31)
    assert intervals.busy_between(grid, cum, 0.0, 30.0) == pytest.approx(19.0)
    assert intervals.busy_between(grid, cum, 8.0, 20.0) == pytest.approx(1.0, abs=1.0)


def test_free_time_and_unoverlapped_communication(tmp_path):
    # Device: compute [0,10) and [20,30); all-reduce [5,15) partly hidden under compute.
    events = [
        process_name(100, "python"),
        kernel("MatMulV2", 0, 10), kernel("Add", 20, 10),
        kernel("hcom_allReduce__1_0_1", 5, 10, tid=9),
        cpu_op("aten::mm", 0, 2),  # host ops are ignored once device kernels exist
    ]
    lane = _lane(write_trace(tmp_path / "t.json", events))
    assert lane.basis == "device kernels"
    assert lane.window_us == 30 and lane.busy_us == 25 and lane.free_us == 5
    assert lane.compute_us == 20 and lane.comm_us == 10
    assert lane.comm_not_overlapped_us == 5  # [10,15) runs alone
    split = analysis.time_split([lane])
    assert split["free_fraction"] == pytest.approx(5 / 30)
    assert split["comm_not_overlapped_fraction"] == pytest.approx(5 / 30)
    assert split["comm_overlapped_share"] == pytest.approx(0.5)
    assert lane.ops == {"MatMulV2": [1, 10.0], "Add": [1, 10.0], "hcom_allReduce__1_0_1": [1, 10.0]}


def test_mc2_kernel_counts_as_compute(tmp_path):
    lane = _lane(write_trace(tmp_path / "t.json", [kernel("MatmulAllReduce", 0, 10)]))
    assert lane.comm_us == 0 and lane.compute_us == 10


def test_host_ops_self_time(tmp_path):
    # aten::linear [0,10) contains aten::addmm [1,7) which contains aten::copy_ [2,3); another thread runs in parallel.
    events = [cpu_op("aten::linear", 0, 10), cpu_op("aten::addmm", 1, 6), cpu_op("aten::copy_", 2, 1),
              cpu_op("aten::mul", 40, 5, tid=101), annotation("actor_update", 0, 45)]
    lane = _lane(write_trace(tmp_path / "t.json", events))
    assert lane.basis == "host ops"
    assert lane.ops["aten::linear"] == [1, 4.0]
    assert lane.ops["aten::addmm"] == [1, 5.0]
    assert lane.ops["aten::copy_"] == [1, 1.0]
    assert lane.ops["aten::mul"] == [1, 5.0]
    assert lane.window_us == 45 and lane.busy_us == 15 and lane.free_us == 30
    assert lane.stages == {"actor_update": 45}


def test_base_time_aligns_files(tmp_path):
    a = write_trace(tmp_path / "a.json", [kernel("k", 1000, 10)], meta={"baseTimeNanoseconds": 5_000_000})
    b = write_trace(tmp_path / "b.json", [kernel("k", 0, 10)], meta={"baseTimeNanoseconds": 6_000_000})
    la, lb = _lane(a), _lane(b)
    assert la.first_us == lb.first_us == 6000.0


def test_ascend_trace_view_overlap_analysis(tmp_path):
    # torch_npu's trace_view.json: a bare array, string timestamps, device tasks in "Ascend Hardware",
    # torch_npu's own overlap numbers in "Overlap Analysis".
    events = [
        process_name(2, "Ascend Hardware"), process_name(3, "HCCL"), process_name(9, "Overlap Analysis"),
        thread_name(9, 1, "Computing"), thread_name(9, 2, "Communication"),
        thread_name(9, 3, "Communication(Not Overlapped)"), thread_name(9, 4, "Free"),
        {"ph": "X", "name": "RmsNorm", "pid": 2, "tid": 1, "ts": "1700000000000000.000", "dur": "40.000"},
        {"ph": "X", "name": "hcom_allReduce__7", "pid": 3, "tid": 1, "ts": "1700000000000030.000", "dur": 20},
        {"ph": "X", "name": "Computing", "pid": 9, "tid": 1, "ts": "1700000000000000.0", "dur": 40},
        {"ph": "X", "name": "Communication", "pid": 9, "tid": 2, "ts": "1700000000000030.0", "dur": 20},
        {"ph": "X", "name": "Communication(Not Overlapped)", "pid": 9, "tid": 3, "ts": "1700000000000040.0", "dur": 10},
        {"ph": "X", "name": "Free", "pid": 9, "tid": 4, "ts": "1700000000000050.0", "dur": 50},
    ]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events)[:-1] + ",")  # no closing bracket, as the format allows
    lane = _lane(path)
    assert lane.platform == "npu" and lane.overlap_basis.startswith("trace_view.json")
    assert lane.compute_us == 40 and lane.comm_not_overlapped_us == 10 and lane.free_us == 50
    assert lane.window_us == 100
    assert lane.fused_hits == {"fused_rmsnorm": 1}
    assert set(lane.ops) == {"RmsNorm", "hcom_allReduce__7"}


def _rollout_lane(tmp_path, replica: int, end_ms: float, gap_in_tail: bool = False) -> LaneStats:
    # Busy from 0 to end_ms in 1 ms kernels; optionally idle every other ms after 20 ms.
    evs = []
    t = 0.0
    while t < end_ms * 1000:
        idle = gap_in_tail and t >= 20_000 and int(t // 1000) % 2 == 0
        if not idle:
            evs.append(kernel("decode", t, 1000))
        t += 1000
    path = write_trace(tmp_path / f"agent_loop_rollout_replica_{replica}" / "t.json", evs)
    return _lane(path, kind="rollout", replica=replica)


def test_tail_fraction_by_construction(tmp_path):
    # Four replicas finish at 10, 10, 20 and 40 ms. Fewer than half (< 2) still run once three have
    # finished: from 20 ms to 40 ms, i.e. half of the 40 ms rollout. The last one idles half the time then.
    lanes = [_rollout_lane(tmp_path, 0, 10), _rollout_lane(tmp_path, 1, 10), _rollout_lane(tmp_path, 2, 20),
             _rollout_lane(tmp_path, 3, 40, gap_in_tail=True)]
    rounds = analysis.rollout_rounds(lanes)
    assert len(rounds) == 1 and len(rounds[0]) == 4
    t = analysis.tail_of_round(rounds[0], 0.5)
    assert t["wall_s"] == pytest.approx(0.040)
    assert t["tail_s"] == pytest.approx(0.020) and t["tail_fraction"] == pytest.approx(0.5)
    assert t["straggler_fraction"] == pytest.approx(0.75)
    assert t["free_fraction_in_tail"] == pytest.approx(0.5, abs=0.03)
    summary = analysis.rollout_tail(rounds, S, None)
    assert summary["tail_fraction"] == pytest.approx(0.5) and "note" not in summary


@pytest.mark.parametrize("n, ends, expected", [
    (1, [10], 0.0),           # one lane: nobody waits
    (2, [10, 40], 0.0),       # "fewer than half" of 2 running means none: 0 by construction
    (3, [10, 20, 40], 0.5),   # from the 2nd finish (1 of 3 running) to the end
    (8, [5, 5, 5, 5, 10, 20, 30, 40], 0.75),  # from the 5th finish (3 of 8 < 4 running)
])
def test_tail_threshold_counts(tmp_path, n, ends, expected):
    lanes = [_rollout_lane(tmp_path / str(n), i, e) for i, e in enumerate(ends)]
    t = analysis.tail_of_round(lanes, 0.5)
    assert t["tail_fraction"] == pytest.approx(expected)


def test_two_lanes_report_stragglers_and_a_note(tmp_path):
    lanes = [_rollout_lane(tmp_path, 0, 10), _rollout_lane(tmp_path, 1, 40)]
    out = analysis.rollout_tail(analysis.rollout_rounds(lanes), S, None)
    assert out["tail_fraction"] is None and out["straggler_fraction"] == pytest.approx(0.75)
    assert "at least 3" in out["note"]


def test_rounds_split_by_time_without_step_names(tmp_path):
    a = write_trace(tmp_path / "agent_loop_rollout_replica_0" / "a.json", [kernel("k", 0, 10)])
    b = write_trace(tmp_path / "agent_loop_rollout_replica_0" / "b.json", [kernel("k", 1000, 10)])
    c = write_trace(tmp_path / "agent_loop_rollout_replica_1" / "c.json", [kernel("k", 5, 20)])
    lanes = [_lane(p, kind="rollout") for p in (a, b, c)]
    rounds = analysis.rollout_rounds(lanes)
    assert [len(r) for r in rounds] == [2, 1]


def test_phases_and_ratio_from_metrics(tmp_path):
    # Step 2 carries the agent-loop spread the way upstream's legacy trainer logs it: under timing_s/.
    log = write_metrics(tmp_path / "m.jsonl", {
        1: {"gen": 10.0, "old_log_prob": 1.0, "update_actor": 3.0, "adv": 0.5, "step": 15.0},
        2: {"gen": 20.0, "old_log_prob": 1.0, "update_actor": 3.0, "adv": 0.5, "step": 25.0,
            "agent_loop/generate_sequences/max": 20.0, "agent_loop/generate_sequences/mean": 12.0},
    }, extra={1: {"agent_loop/generate_sequences/max": 10.0, "agent_loop/generate_sequences/mean": 4.0}})
    ph = analysis.phases_from_metrics([read_metrics_log(log)], S)
    assert ph["mean_s"]["gen"] == 15.0 and ph["train_s"] == 4.0 and ph["rollout_s"] == 15.0
    assert ph["rollout_per_train"] == pytest.approx(3.75)
    assert ph["share_of_step"]["gen"] == pytest.approx(0.75)
    assert [r["rollout_per_train"] for r in ph["per_step"]] == [2.5, 5.0]
    assert ph["straggler_proxy"] == pytest.approx((0.6 + 0.4) / 2)
    assert ph["phases"] == ["gen", "old_log_prob", "adv", "update_actor"]  # statistics are not phases


def test_metrics_log_bad_lines_are_named_and_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    good = json.dumps({"step": 1, "data": {"timing_s/gen": 2.0}})
    path.write_text(good + "\n{not json\n" + json.dumps({"step": "two", "data": {}}) + "\n"
                    + json.dumps([1, 2]) + "\n" + good.replace('"step": 1', '"step": 3')[:-5])
    log = read_metrics_log(path)
    assert [s.step for s in log.steps] == [1]
    assert [p.line for p in log.problems] == [2, 3, 4, 5]
    assert "cut off" in log.problems[-1].message
    assert all(p.path == str(path) for p in log.problems)


def test_metrics_log_with_nothing_valid_is_an_error(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("hello\n")
    with pytest.raises(InputFormatError) as info:
        read_metrics_log(path)
    assert str(path) in str(info.value) and '{"step"' in str(info.value)


def test_phases_from_traces_without_metrics(tmp_path):
    # Training: two discrete stage traces of rank 0, step 3: 2 ms + 5 ms of stage annotation.
    write_trace(tmp_path / "actor_rollout_actor_compute_log_prob_step3_rank0_pid1.json",
                [annotation("actor_compute_log_prob", 0, 2000), cpu_op("aten::mm", 0, 1000)])
    write_trace(tmp_path / "actor_rollout_actor_update_step3_rank0_pid1.json",
                [annotation("actor_update", 10_000, 5000), cpu_op("aten::mm", 10_000, 1000)])
    for r, end in ((0, 7000), (1, 14000)):
        write_trace(tmp_path / f"agent_loop_rollout_replica_{r}" / f"gen_step3_rank{r}.json", [cpu_op("aten::mm", 0, end)])
    rep = build_report([tmp_path])
    ph = rep.data["phases"]
    assert ph["source"] == "traces"
    assert ph["train_s"] == pytest.approx(0.007) and ph["rollout_s"] == pytest.approx(0.014)
    assert ph["rollout_per_train"] == pytest.approx(2.0)
