"""The acceptance command end to end, as CI runs it on a CPU: ``verl-ascend accept``.

Under the NPU emulator and vLLM's CPU build: a real vLLM process and a 2-step tiny DAPO with a
profiled step. The report must list every check with a measured value and a verdict, and mark what
was device-only and skipped here and what stood in for it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch import require_e2e

pytestmark = [
    pytest.mark.e2e,  # launches the recipe and vLLM
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None and not os.environ.get("CI"),
                       reason="vLLM's CPU build not installed (make vllm)"),
]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def accepted(tiny_dir, tmp_path_factory):
    require_e2e("verl-ascend accept")
    out = tmp_path_factory.mktemp("accept") / "report"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "verl_ascend", "accept", "--out", str(out), "--tiny-dir", str(tiny_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=2400)
    report = json.loads((out / "accept.json").read_text()) if (out / "accept.json").is_file() else None
    return proc, out, report


def test_exits_0_and_prints_the_report_and_its_folder(accepted):
    proc, out, report = accepted
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    assert f"report folder: {out}" in proc.stdout
    assert proc.stdout.count("acceptance: OK") == 1
    assert (out / "accept.txt").read_text() in proc.stdout
    assert report["verdict"] == "pass" and report["mode"].startswith("CPU")


def test_every_check_in_order_with_a_measured_value_and_a_verdict(accepted):
    _, _, report = accepted
    checks = report["checks"]
    assert [c["id"] for c in checks] == ["stack", "fused_ops", "vllm_env", "dapo", "trace"]
    for check in checks:
        assert check["value"], check["id"]
        assert check["verdict"] in ("pass", "skipped"), check
    by_id = {c["id"]: c for c in checks}
    # The gate ran; a CPU host has no NPU set, so its refusal is recorded and marked device-only.
    assert by_id["stack"]["verdict"] == "skipped" and by_id["stack"]["value"]["exit_status"] != 0
    assert by_id["stack"]["value"]["lines"]
    for check_id in ("fused_ops", "vllm_env", "dapo", "trace"):
        assert by_id[check_id]["verdict"] == "pass"
    for check in checks:  # on a CPU each check says what it could not prove here and what stood in
        assert check["device_only"] and check["stands_in"], check["id"]


def test_fused_ops_measured_per_op_and_dtype(accepted):
    ops = {c["id"]: c for c in accepted[2]["checks"]}["fused_ops"]["value"]
    for op in ("npu_rms_norm", "npu_swiglu", "npu_rotary_mul", "npu_fusion_attention"):
        for dtype, measured in ops[op].items():
            assert 0 <= measured["margin"] <= 1, (op, dtype, measured)
    assert ops["npu_rms_norm"]["bfloat16"]["max_abs_err"] > 0  # one rounding to bf16 was measured


def test_each_vllm_process_received_the_rollout_profile(accepted):
    value = {c["id"]: c for c in accepted[2]["checks"]}["vllm_env"]["value"]
    assert value["generated_tokens"] == 4
    assert len(value["processes"]) >= 2  # the launcher and vLLM's engine core at least
    assert value["variables_checked"] == len(value["expected"]) * len(value["processes"])
    binding = "0" if platform.machine() in ("aarch64", "arm64") else "1"  # vllm-ascend binds on ARM only
    assert value["expected"]["VERL_PLATFORM"] == "huawei" and value["expected"]["CPU_AFFINITY_CONF"] == binding


def test_both_dapo_steps_wrote_metrics_and_ran_the_fused_kernels(accepted):
    value = {c["id"]: c for c in accepted[2]["checks"]}["dapo"]["value"]
    assert value["exit_status"] == 0 and value["steps_with_metrics"] == [1, 2]
    assert value["processes_counting"] >= 1
    assert all(value["fused_kernel_calls"][op] > 0 for op in ("rms_norm", "swiglu", "rotary_mul")), value


def test_the_profiled_step_trace_holds_the_emulator_op_ranges(accepted):
    check = {c["id"]: c for c in accepted[2]["checks"]}["trace"]
    ranges = check["value"]["emulator_op_ranges"]
    assert all(ranges.get(op, 0) > 0 for op in ("npu_rms_norm", "npu_swiglu", "npu_rotary_mul")), ranges
    assert any("step2" in path for path in check["value"]["traces"])
    assert any("MatmulAllReduce" in line for line in check["device_only"])
