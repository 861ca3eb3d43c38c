"""The acceptance command's fast parts (``verl-ascend accept``): report, exit codes, failing checks.

The whole command (a real vLLM process and a 2-step DAPO) runs in tests/npu/test_accept_e2e.py.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest
import torch

from verl.ascend.accept import cli, ops_check, record, run_check, vllm_env
from verl.ascend.accept.record import FAIL, PASS, SKIPPED, Check, exit_code, write_report
from verl_ascend.checks.exits import OK, REFUSED


def test_report_lists_each_check_with_value_verdict_and_skips(tmp_path):
    checks = [Check("a", "first", value={"err": 0.123456789}),
              Check("b", "second", verdict=SKIPPED, device_only=["kernels"], stands_in=["emulator"]),
              Check("c", "third", verdict=FAIL, detail=["op x outside tolerance"])]
    json_path, text_path, text = write_report(tmp_path, checks, {"host": "h", "mode": "m", "started": "t"})
    data = json.loads(json_path.read_text())
    assert data["verdict"] == FAIL
    assert [(c["id"], c["verdict"]) for c in data["checks"]] == [("a", PASS), ("b", SKIPPED), ("c", FAIL)]
    assert data["checks"][0]["value"] == {"err": 0.123456789}  # JSON keeps the number whole
    assert data["checks"][1]["device_only"] == ["kernels"] and data["checks"][1]["stands_in"] == ["emulator"]
    assert text_path.read_text() == text
    assert "err: 0.123" in text and "device-only, skipped here: kernels" in text and "stands in here: emulator" in text
    assert text.rstrip().endswith("acceptance: FAILED (c)")
    assert not list(tmp_path.glob("*.tmp"))


def test_exit_code_fails_only_on_a_failed_check():
    assert exit_code([Check("a", "x"), Check("b", "y", verdict=SKIPPED)]) == OK == 0
    # A failed check is a refusal of the host (the checks' one table), never 1 ("the command broke").
    assert exit_code([Check("a", "x"), Check("b", "y", verdict=FAIL)]) == REFUSED == 2
    with pytest.raises(ValueError, match="verdict 'ok' is not one of pass, FAIL, skipped"):
        Check("a", "x", verdict="ok")


@pytest.mark.parametrize("argv,message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--checks", "fused_ops,nope"], "unknown check(s) nope; accepted: stack, fused_ops, vllm_env, dapo, trace"),
    (["--checks", "trace"], "trace reads the profiled step of the dapo run; add dapo"),
    (["--tp", "0"], "--tp 0: the rollout TP is a positive integer"),
    (["--timeout", "-5"], "--timeout -5: accepted: seconds > 0"),
    (["--timeout", "0"], "--timeout 0: accepted: seconds > 0"),
    (["--timeout", "nan"], "--timeout nan: accepted: seconds > 0"),
])
def test_bad_options_exit_2_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == REFUSED
    assert message in capsys.readouterr().err


def test_unwritable_report_folder_exits_2_and_writes_nothing(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    assert cli.main(["--checks", "fused_ops", "--out", str(blocker / "report")]) == REFUSED
    err = capsys.readouterr().err
    assert f"--out {blocker / 'report'}: the report folder cannot be written" in err
    assert blocker.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_folder_holding_an_earlier_run_is_refused(tmp_path, capsys):
    (tmp_path / "dapo").mkdir()
    assert cli.main(["--checks", "dapo", "--out", str(tmp_path)]) == REFUSED
    assert "it already holds an acceptance run (dapo/); give a new folder" in capsys.readouterr().err


def _report(folder):
    return {c["id"]: c for c in json.loads((folder / "accept.json").read_text())["checks"]}


def test_fused_ops_pass_with_measured_errors_and_the_skips_marked(tmp_path):
    assert cli.main(["--checks", "stack,fused_ops", "--out", str(tmp_path)]) == OK
    checks = _report(tmp_path)
    ops = checks["fused_ops"]
    assert ops["verdict"] == PASS
    for op, dtypes in ops_check.DTYPES.items():
        for dtype in dtypes:
            measured = ops["value"][op][dtype]
            assert 0 <= measured["margin"] <= 1 and measured["max_abs_err"] >= 0
    # Half precision rounds once: about half of the two-rounding tolerance, never zero.
    assert 0.2 < ops["value"]["npu_rms_norm"]["bfloat16"]["margin"] < 0.8
    assert ops["device_only"] and ops["stands_in"]
    # No NPU set on a CPU host: the gate ran, its text is kept, its refusal is marked device-only.
    stack = checks["stack"]
    assert stack["verdict"] == SKIPPED and stack["value"]["exit_status"] != 0
    assert any("torch-npu" in line or "torch_npu" in line for line in stack["value"]["lines"])  # the culprit named


def test_an_op_outside_tolerance_fails_the_command(tmp_path, monkeypatch, torch_npu):
    real = torch_npu.npu_swiglu
    monkeypatch.setattr(torch_npu, "npu_swiglu", lambda x, dim=-1: real(x, dim=dim) * 1.01)
    assert cli.main(["--checks", "fused_ops", "--out", str(tmp_path)]) == REFUSED
    ops = _report(tmp_path)["fused_ops"]
    assert ops["verdict"] == FAIL
    assert any(line.startswith("npu_swiglu float32: max error") for line in ops["detail"])
    assert ops["value"]["npu_rms_norm"]["float32"]["margin"] == 0.0  # the other ops still pass
    assert "acceptance: FAILED (fused_ops)" in (tmp_path / "accept.txt").read_text()


def test_a_refusing_kernel_fails_naming_op_and_dtype(tmp_path, monkeypatch, torch_npu):
    def refuse(*args, **kwargs):
        raise RuntimeError("EZ9999 kernel not supported")

    monkeypatch.setattr(torch_npu, "npu_rotary_mul", refuse)
    check = ops_check.run(torch_npu, "cpu", emulated=True)
    assert check.verdict == FAIL
    assert "npu_rotary_mul bfloat16: RuntimeError: EZ9999 kernel not supported" in check.detail


def test_the_vllm_plugin_reports_what_arrived_and_a_doctored_value_fails(tmp_path):
    from verl.ascend.env.vllm_plugin import write_arrival_report

    expected, delivered = vllm_env.delivered_env(tp=1)
    # The rollout role: vllm-ascend binds its workers on ARM only, so the profile binds on other hosts.
    binding = "0" if platform.machine() in ("aarch64", "arm64") else "1"
    assert expected["VERL_PLATFORM"] == "huawei" and expected["CPU_AFFINITY_CONF"] == binding
    assert "VERL_ASCEND_NPU_EMULATOR" not in expected  # vLLM runs as itself, never under the emulator
    good = write_arrival_report(str(tmp_path / "good"), environ=dict(delivered))
    assert good["received"]["TASK_QUEUE_ENABLE"] == expected["TASK_QUEUE_ENABLE"]
    assert vllm_env.compare(expected, vllm_env.read_reports(tmp_path / "good")) == []
    doctored = {**delivered, "TASK_QUEUE_ENABLE": "0"}
    doctored.pop("HCCL_CONNECT_TIMEOUT")
    write_arrival_report(str(tmp_path / "bad"), environ=doctored)
    problems = vllm_env.compare(expected, vllm_env.read_reports(tmp_path / "bad"))
    pid = os.getpid()
    assert problems == [f"vLLM process {pid}: HCCL_CONNECT_TIMEOUT did not arrive (profile: 1800)",
                        f"vLLM process {pid}: TASK_QUEUE_ENABLE=0 arrived, the profile emitted "
                        f"{expected['TASK_QUEUE_ENABLE']}"]
    assert vllm_env.compare(expected, []) == [
        "no vLLM process wrote an arrival report: the general plugin verl_ascend_env_check did not run"]


def test_fused_op_counts_are_written_per_process_and_summed(tmp_path, monkeypatch):
    from verl.ascend.ops import counts

    monkeypatch.setattr(counts, "_counts", counts.Counter())
    monkeypatch.setitem(counts._state, "dir", str(tmp_path))
    for op in ("rms_norm", "rms_norm", "swiglu"):
        counts.record(op)  # each call is on disk at once: Ray ends workers without atexit
    assert counts.read(tmp_path) == {str(os.getpid()): {"rms_norm": 2, "swiglu": 1}}
    monkeypatch.setitem(counts._state, "dir", None)
    counts.record("rotary_mul")  # unset: nothing is counted
    assert "rotary_mul" not in counts._counts


def test_patched_forwards_count_their_kernel_calls(tmp_path, monkeypatch):
    from recipe.dapo_ascend.tiny.assets import build_model
    from verl.ascend.ops import apply_fused_ops, counts

    monkeypatch.setattr(counts, "_counts", counts.Counter())
    monkeypatch.setitem(counts._state, "dir", str(tmp_path))
    apply_fused_ops("qwen2")
    model = build_model(seed=0)
    model(input_ids=torch.tensor([[3, 4, 5, 6, 13]]))  # "0 1 2 3 =" in the tiny vocabulary
    layers = model.config.num_hidden_layers
    assert dict(counts._counts) == {"rms_norm": 2 * layers + 1, "swiglu": layers, "rotary_mul": layers}


def test_emulator_ops_leave_named_ranges_in_a_cpu_trace(tmp_path, torch_npu):
    x = torch.randn(2, 4, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch_npu.npu_rms_norm(x, torch.ones(8))
        torch_npu.npu_swiglu(x)
        torch_npu.npu_swiglu(x)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    assert run_check.emulator_ranges([tmp_path / "trace.json"]) == {"npu_rms_norm": 1, "npu_swiglu": 2}


def test_dapo_check_needs_both_steps_and_every_fused_kernel(tmp_path):
    metrics = tmp_path / run_check.EXPERIMENT / "metrics.jsonl"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5, "timing_s/step": 3.0}}) + "\n")
    (tmp_path / "fused_op_counts").mkdir()
    (tmp_path / "fused_op_counts" / "7.json").write_text(json.dumps({"pid": 7, "counts": {"rms_norm": 5, "swiglu": 2}}))
    check = run_check.dapo_check(tmp_path, 0, emulated=True)
    assert check.verdict == FAIL
    assert check.value["fused_kernel_calls"] == {"rms_norm": 5, "swiglu": 2, "rotary_mul": 0}
    assert check.detail == [
        f"no metrics for step(s) [2] in {metrics}",
        "the fused rotary_mul forward never ran its kernel torch_npu.npu_rotary_mul in any training process"]


def test_no_trace_is_read_when_the_dapo_run_failed(tmp_path):
    check = run_check.trace_kernels_check(tmp_path, emulated=True, tp=1, mc2_requested=False, run_ok=False)
    assert check.verdict == FAIL
    assert check.detail == [f"no profiled step to read: the dapo run failed (see {tmp_path / 'run.log'})"]


def test_a_check_that_crashes_is_a_failed_check_and_the_report_is_still_written(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("device lost")

    monkeypatch.setattr(ops_check, "run", broken)
    assert cli.main(["--checks", "stack,fused_ops", "--out", str(tmp_path)]) == REFUSED
    checks = _report(tmp_path)
    assert checks["fused_ops"]["verdict"] == FAIL and checks["fused_ops"]["detail"] == ["RuntimeError: device lost"]
    assert checks["stack"]["verdict"] == SKIPPED  # the other checks still ran and were reported


@pytest.mark.parametrize("how", ["ctrl-c here", "recipe exited 130", "recipe died of SIGINT"])
def test_an_interrupted_run_says_so_exits_130_and_files_no_verdict(tmp_path, monkeypatch, capsys, how):
    """Ctrl-C reaches this process (KeyboardInterrupt) or only the recipe child, which exits 130: either way the
    user stopped it; the host did not fail acceptance."""
    import subprocess

    def launch(*args):
        if how == "ctrl-c here":
            raise KeyboardInterrupt
        return subprocess.CompletedProcess("recipe", 130 if how == "recipe exited 130" else -2)

    monkeypatch.setattr(run_check, "launch", launch)
    monkeypatch.setattr(cli, "_build_tiny", lambda *args: None)
    assert cli.main(["--checks", "dapo", "--out", str(tmp_path / "report")]) == cli.INTERRUPTED == 130
    captured = capsys.readouterr()
    assert "interrupted: no verdict on this host and no report" in captured.err
    assert "FAILED" not in captured.out + captured.err and not (tmp_path / "report" / "accept.json").exists()


def test_a_vllm_probe_stopped_by_ctrl_c_is_an_interruption(tmp_path, monkeypatch, capsys):
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: subprocess.CompletedProcess("probe", 130))
    monkeypatch.setattr(cli, "_build_tiny", lambda *args: None)
    assert cli.main(["--checks", "vllm_env", "--out", str(tmp_path / "report")]) == 130
    assert "interrupted" in capsys.readouterr().err and not (tmp_path / "report" / "accept.json").exists()


def _metrics(folder, steps: dict[int, dict]) -> None:
    path = folder / run_check.EXPERIMENT / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.5, **d}}) + "\n"
                            for s, d in steps.items()))
    (folder / "fused_op_counts").mkdir()
    (folder / "fused_op_counts" / "7.json").write_text(
        json.dumps({"pid": 7, "counts": {"rms_norm": 5, "swiglu": 2, "rotary_mul": 1}}))


def test_the_separate_async_run_records_each_steps_weight_sync_from_upstreams_timer(tmp_path):
    _metrics(tmp_path, {1: {"timing_s/update_weights": 11.8}, 2: {"timing_s/update_weights": 12.4}})
    check = run_check.dapo_check(tmp_path, 0, emulated=False, mode="separate_async")
    assert check.verdict != FAIL, check.detail
    assert check.value["weight_sync"] == {
        "trainer_mode": "separate_async", "metric": "timing_s/update_weights",
        "what": "HCCL broadcast from trainer rank 0 into the standalone rollout pool", "seconds": {1: 11.8, 2: 12.4}}
    record.write_report(tmp_path, [check], record.metadata("Ascend NPU"))
    written = json.loads((tmp_path / record.JSON_NAME).read_text())
    assert json.dumps(written).count('"timing_s/update_weights"') == 1 and "12.4" in json.dumps(written)


def test_a_separate_async_run_without_the_sync_timer_fails_the_check(tmp_path):
    _metrics(tmp_path, {1: {"timing_s/update_weights": 11.8}, 2: {}})
    check = run_check.dapo_check(tmp_path, 0, emulated=False, mode="separate_async")
    assert check.verdict == FAIL
    assert check.detail == ["no weight-sync time (timing_s/update_weights) for step(s) [2]: the separate_async run "
                            "is what measures the sync the async guide estimates"]
    assert run_check.dapo_check(tmp_path, 0, emulated=False).verdict != FAIL  # sync: recorded where present


def test_separate_async_adds_a_rollout_pool_and_the_hccl_engine():
    args = run_check.overrides(Path("/r"), emulated=False, tp=2, mode="separate_async")
    assert {"trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=2", "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
            "trainer.v1.separate_async.parameter_sync_step=1"} <= set(args)
    assert not [a for a in run_check.overrides(Path("/r"), emulated=False, tp=2) if "separate_async" in a]


def test_separate_async_on_the_emulator_is_refused_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "acc"
    assert cli.main(["--trainer-mode", "separate_async", "--out", str(out)]) == REFUSED
    assert "the emulator does not have; accepted here: --trainer-mode sync" in capsys.readouterr().err
    assert not out.exists()


def test_the_record_puts_the_memory_plan_next_to_the_measured_peaks(tmp_path, tiny_dir):
    """accept.json's dapo check carries the plan of the run's own config (trainer.device=npu: a 910B) next to
    upstream's actor/perf/max_memory_*_gb of the run, so the first host run calibrates the plan."""
    metrics = tmp_path / run_check.EXPERIMENT / "metrics.jsonl"
    metrics.parent.mkdir()
    rows = [{"step": s, "data": {"critic/score/mean": 0.5, "actor/perf/max_memory_allocated_gb": 0.25 * s,
                                 "actor/perf/max_memory_reserved_gb": 0.5 * s}} for s in (1, 2)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    value = run_check.memory_value(tmp_path, tiny_dir, emulated=True, tp=1)
    assert value["device"] == "Ascend 910B (A2)"
    assert value["measured_gib"] == {"perf/max_memory_allocated_gb": 0.5, "perf/max_memory_reserved_gb": 1.0}
    assert set(value["planned_gib"]) == {"actor update", "old log-prob"} and value["planned_peak_phase"] == "actor update"
    # the relative difference against the unrounded plan (planned_gib is rounded to MiB for reading)
    assert abs((1 + value["allocated_vs_planned"]) * value["planned_gib"]["actor update"] - 0.5) < 0.5 * 0.05
