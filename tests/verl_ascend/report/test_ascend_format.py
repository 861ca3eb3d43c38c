"""torch_npu text-export fixtures (written from the Ascend PyTorch Profiler user guide's formats) and the
"optimisations active" checklist."""

from __future__ import annotations

import json

import pytest
from conftest import KERNEL_HEADER, kernel_row, write_ascend_dir

from verl_ascend.report.ascend_csv import norm_header, read_step_trace_time
from verl_ascend.report.lanes import LaneStats, analyze_ascend_dir
from verl_ascend.report.problems import InputFormatError
from verl_ascend.report.report import build_report
from verl_ascend.report.settings import load_settings

S = load_settings()

# A decode step on an NPU: fused kernels, a matmul, an all-reduce, with gaps (host-bound free time).
KERNELS = [
    ("aclnnRmsNorm_RmsNorm_RmsNorm", "RmsNorm", 1_000_000.0, 10.0),
    ("aclnnMatmul_MatMulCommon_MatMulV2", "MatMulV2", 1_000_020.0, 40.0),
    ("aclnnSwiGlu_SwiGlu_SwiGlu", "SwiGlu", 1_000_070.0, 10.0),
    ("hcom_allReduce__123_1_1", "hcom_allReduce_", 1_000_060.0, 30.0, "COMMUNICATION"),
    ("aclnnMatmul_MatMulCommon_MatMulV2", "MatMulV2", 1_000_100.0, 40.0),
]


def _ascend_lane(d, kind="rollout") -> LaneStats:
    return analyze_ascend_dir(str(d), LaneStats(kind=kind, label="x", source=str(d), fmt="ascend"), S)


def test_header_normalisation():
    assert norm_header("Communication (Not Overlapped)") == norm_header("Communication(Not Overlapped)")
    assert norm_header("Host Self Duration (µs)") == "hostselfduration(us)"
    assert norm_header("\ufeffStep Id") == "stepid"


def test_kernel_details_intervals_and_ops(tmp_path):
    d = write_ascend_dir(tmp_path, "host_1_20260101_ascend_pt", rank=3, kernels=KERNELS)
    lane = _ascend_lane(d)
    assert lane.platform == "npu" and lane.basis == "device kernels" and lane.events == 5
    # busy: [0,10) [20,60) [60,90 comm) [70,80) [100,140) -> union 10+70+40 = 120 of a 140 us window
    assert lane.window_us == pytest.approx(140) and lane.busy_us == pytest.approx(120)
    assert lane.free_us == pytest.approx(20)
    assert lane.comm_us == pytest.approx(30)
    assert lane.comm_not_overlapped_us == pytest.approx(20)  # [60,70) and [80,90): no compute
    assert lane.ops["aclnnMatmul_MatMulCommon_MatMulV2"] == [2, pytest.approx(80.0)]
    assert lane.op_types["aclnnSwiGlu_SwiGlu_SwiGlu"] == "SwiGlu"
    assert lane.fused_hits == {"fused_rmsnorm": 1, "fused_swiglu": 1}


def test_step_trace_time_overrides_interval_estimate(tmp_path):
    # computing, not overlapped, overlapped, communication, free (us) for two steps
    d = write_ascend_dir(tmp_path, "h_ascend_pt", 0, KERNELS, step_rows=[(800, 100, 50, 150, 300), (700, 50, 0, 50, 250)])
    lane = _ascend_lane(d)
    assert lane.overlap_basis == "step_trace_time.csv"
    assert lane.compute_us == 1500 and lane.comm_not_overlapped_us == 150 and lane.free_us == 550
    assert lane.window_us == 2200 and lane.comm_us == 200


def test_step_trace_time_variants(tmp_path):
    # Older releases: no Device_id, spaces in names, empty Step, tab-suffixed numbers.
    p = tmp_path / "step_trace_time.csv"
    p.write_text("Step,Computing,Communication (Not Overlapped),Overlapped,Communication,Free\n"
                 ",201420.74\t,195349.64,0,224087.84,230068.36\n")
    st, problems = read_step_trace_time(p)
    assert problems == [] and st.steps == [None]
    assert st.total == pytest.approx(201420.74 + 195349.64 + 230068.36)


def test_operator_details_host_ops_and_npu_ops(tmp_path):
    d = write_ascend_dir(tmp_path, "h_ascend_pt", 0, KERNELS,
                         ops=[("aten::mul", 30, 5), ("npu::npu_rotary_mul", 12, 8), ("aten::mul", 10, 5)])
    lane = _ascend_lane(d)
    assert lane.host_ops["aten::mul"] == [2, 40.0, 10.0]
    assert lane.fused_hits["fused_rotary"] == 1


def test_checklist_mc2_requested_but_missing_and_conflicts(tmp_path):
    run = tmp_path / "run"
    write_ascend_dir(run / "profile" / "agent_loop_rollout_replica_0", "h_ascend_pt", 0, KERNELS,
                     step_rows=[(800, 100, 50, 150, 300)])
    (run / "env_profile.json").write_text(json.dumps({"roles": {"rollout": {"env": {
        "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE": "1", "HCCL_OP_EXPANSION_MODE": "AIV", "TASK_QUEUE_ENABLE": "2",
        "VLLM_USE_V1": "1"}}}}))
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text(
        "actor_rollout_ref:\n  rollout:\n    enforce_eager: false\n    enable_chunked_prefill: true\n"
        "  actor:\n    strategy: fsdp2\n    fsdp_config:\n      forward_prefetch: true\n")
    rep = build_report([run])
    items = {i["id"]: i for i in rep.data["checklist"]}
    assert items["fused_rmsnorm"]["status"] == "active" and "rollout: 1 calls" in items["fused_rmsnorm"]["detail"]
    assert items["fused_rotary"]["status"] == "MISSING" and items["fused_rotary"]["fix"]
    assert items["mc2_matmul_allreduce"]["status"] == "MISSING"
    assert "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE=1" in items["mc2_matmul_allreduce"]["detail"]
    assert items["task_queue"]["status"] == "CONFLICT"  # level 2 with graph mode
    assert items["hccl_aiv"]["status"] == "CONFLICT"  # AIV with mc2
    assert "vllm_v1" not in items and items["chunked_prefill"]["status"] == "active"  # no V1 switch in vLLM 0.23
    assert items["graph_mode"]["status"] == "active"
    assert items["forward_prefetch"]["status"] == "n/a"  # no effect under fsdp2
    assert rep.data["time_split"]["rollout"]["free_fraction"] == pytest.approx(300 / 1200)
    assert rep.data["top_ops"]["rollout"]["rows"][0]["name"] == "aclnnMatmul_MatMulCommon_MatMulV2"
    assert rep.data["top_ops"]["rollout"]["rows"][0]["type"] == "MatMulV2"


def test_checklist_mc2_present_and_not_requested(tmp_path):
    kernels = KERNELS + [("aclnnMatmulAllReduce_MatmulAllReduce", "MatmulAllReduce", 1_000_200.0, 20.0)]
    write_ascend_dir(tmp_path, "h_ascend_pt", 0, kernels)
    (tmp_path / "env_profile.json").write_text(json.dumps({"env": {"TASK_QUEUE_ENABLE": "1"}}))
    items = {i["id"]: i for i in build_report([tmp_path]).data["checklist"]}
    assert items["mc2_matmul_allreduce"]["status"] == "active"
    assert "not asked for" in items["mc2_matmul_allreduce"]["detail"]
    assert items["task_queue"]["status"] == "off" and "TASK_QUEUE_ENABLE=2" in items["task_queue"]["fix"]


def test_trace_view_used_when_no_kernel_details(tmp_path):
    d = tmp_path / "h_ascend_pt"
    out = d / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    events = [{"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "Ascend Hardware"}},
              {"ph": "X", "name": "SwiGlu", "pid": 2, "tid": 1, "ts": "1000.5", "dur": "10"},
              {"ph": "X", "name": "MatMulV2", "pid": 2, "tid": 1, "ts": "1020.5", "dur": "10"}]
    (out / "trace_view.json").write_text(json.dumps(events))
    lane = _ascend_lane(d)
    assert lane.platform == "npu" and lane.fmt == "ascend"
    assert lane.window_us == pytest.approx(30) and lane.free_us == pytest.approx(10)
    assert lane.fused_hits == {"fused_swiglu": 1}


def test_db_only_and_raw_only_directories_are_explained(tmp_path):
    db = tmp_path / "a_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    db.mkdir(parents=True)
    (db / "ascend_pytorch_profiler_0.db").write_bytes(b"SQLite format 3\x00")
    (tmp_path / "b_ascend_pt" / "PROF_000001_20260101_ABC").mkdir(parents=True)
    rep = build_report([tmp_path])
    msgs = {p.path.rsplit("/", 1)[-1]: p.message for p in rep.problems}
    assert "Db export" in msgs["a_ascend_pt"] and "--export-type text" in msgs["a_ascend_pt"]
    assert "never parsed" in msgs["b_ascend_pt"] and "verl-ascend parse-traces" in msgs["b_ascend_pt"]
    assert not rep.usable


def test_kernel_details_bad_number_names_file_and_line(tmp_path):
    d = write_ascend_dir(tmp_path, "h_ascend_pt", 0, KERNELS)
    csv_path = d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = csv_path.read_text().splitlines()
    lines[3] = lines[3].replace("1000070.000", "10O0070.000")  # letter O instead of zero, on line 4
    csv_path.write_text("\n".join(lines) + "\n")
    lane = _ascend_lane(d)
    assert lane.partial and lane.events == 2  # rows before the bad one are kept
    problem = lane.problems[0]
    assert problem.path == str(csv_path) and problem.line == 4
    assert "Start Time(us)" in problem.message and "10O0070.000" in problem.message


def test_kernel_details_missing_column(tmp_path):
    d = tmp_path / "h_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    d.mkdir(parents=True)
    (d / "kernel_details.csv").write_text("Name,Type,Duration(us)\nRmsNorm,RmsNorm,1\n")
    with pytest.raises(InputFormatError) as info:
        _ascend_lane(d.parent)
    assert "missing column(s) ['Start Time(us)']" in str(info.value) and "kernel_details.csv" in str(info.value)


def test_kernel_details_truncated_last_row(tmp_path):
    d = write_ascend_dir(tmp_path, "h_ascend_pt", 0, KERNELS)
    csv_path = d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    text = csv_path.read_text()
    csv_path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 30])  # cut inside the last row
    lane = _ascend_lane(d)
    assert lane.events == 4 and lane.partial
    assert lane.problems[-1].line == 6 and "cut off" in lane.problems[-1].message


def test_kernel_header_is_the_documented_one():
    # Guard: the fixture header carries every column the Ascend user guide lists for kernel_details.csv.
    for col in ("Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)",
                "Block Num", "Input Shapes", "Output Formats"):
        assert col in KERNEL_HEADER.split(",")
    assert kernel_row("n", "t", 1.0, 2.0).split(",")[9] == "1.000\t"


def test_checklist_judges_graph_mode_from_what_vllm_is_handed(tmp_path):
    """A real composed config where the two spellings differ: the tiny CPU config sets
    engine_kwargs.vllm.enforce_eager=true, which upstream's vLLM server spreads over rollout.enforce_eager."""
    from omegaconf import OmegaConf

    from recipe.dapo_ascend.main_dapo import RECIPE
    compose = RECIPE.compose

    run = tmp_path / "run"
    write_ascend_dir(run / "profile" / "agent_loop_rollout_replica_0", "h_ascend_pt", 0, KERNELS)
    (run / "env_profile.json").write_text(json.dumps({"roles": {"rollout": {"env": {"TASK_QUEUE_ENABLE": "2"}}}}))
    (run / ".hydra").mkdir()
    rollout = "actor_rollout_ref.rollout"

    def judged(*overrides):
        config = compose("dapo_tiny_cpu", [f"{rollout}.name=vllm", *overrides])
        (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(config))
        return {i["id"]: i for i in build_report([run]).data["checklist"]}

    items = judged(f"{rollout}.enforce_eager=false")  # the field says graph mode, vLLM gets eager
    assert items["graph_mode"]["status"] == "off"
    assert items["graph_mode"]["detail"] == f"{rollout}.engine_kwargs.vllm.enforce_eager=True"
    assert items["task_queue"]["status"] == "active"  # level 2 with eager: no conflict
    items = judged(f"{rollout}.enforce_eager=true", f"{rollout}.engine_kwargs.vllm.enforce_eager=false")
    assert items["graph_mode"]["status"] == "active" and items["task_queue"]["status"] == "CONFLICT"
    assert "rollout.engine_kwargs.vllm.enforce_eager=False" in items["task_queue"]["detail"]
    items = judged(f"{rollout}.enforce_eager=false", f"{rollout}.engine_kwargs.vllm.enforce_eager=null")
    assert items["graph_mode"]["status"] == "active"  # no engine-kwarg: the field decides
    assert items["graph_mode"]["detail"] == f"{rollout}.enforce_eager=False"
