"""End to end on the embedded default: `bash examples/dapo_tiny_cpu.sh +profile=cpu`, then the report.

Two profiled steps of the real run: the dapo_ascend trainer's trace check and the HF rollout
server tracing the replicas upstream's rollout profiler config selects; see
docs/ascend_tutorial/profiling.md. CI's regression gate reads the same run's metrics against the
shipped baseline of this run (correctness gated, speed reported; docs/ascend_tutorial/regression_gate.md).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

from tests.launch import require_e2e
from verl_ascend.report.report import build_report

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)


def test_tiny_run_profile_cpu_and_report(tmp_path):
    require_e2e("examples/dapo_tiny_cpu.sh")
    out = tmp_path / "outputs"
    env = dict(os.environ, VERL_ASCEND_OUTPUT_DIR=str(out))
    env.pop("VERL_FILE_LOGGER_PATH", None)
    env.pop("VERL_ASCEND_PROFILE_DIR", None)
    # bypass_mode=false: the demo skips the old-log-prob pass; the profile should show that stage too.
    proc = subprocess.run(["bash", "examples/dapo_tiny_cpu.sh", "+profile=cpu", "trainer.total_training_steps=2",
                           "algorithm.rollout_correction.bypass_mode=false"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[verl-ascend profiler]" not in proc.stderr  # no missing-trace banner
    save = out / "profile" / "dapo_tiny_cpu"
    metrics = out / "dapo_tiny_cpu" / "metrics.jsonl"
    report = build_report([save, metrics])
    assert not report.problems, report.problems
    assert {lane.kind for lane in report.lanes} == {"train", "rollout"}
    stages = {s for lane in report.lanes if lane.kind == "train" for s in lane.stages}
    assert {"actor_compute_log_prob", "actor_update"} <= stages
    ph = report.data["phases"]
    assert ph["source"] == "metrics" and ph["steps"] == [1, 2] and ph["rollout_per_train"] > 0
    rows = report.data["top_ops"]["rollout"]["rows"]
    # The model's matmuls ran inside the traced rollout server.
    assert {"aten::linear", "aten::mm", "aten::addmm", "aten::matmul"} & {r["name"] for r in rows}

    gate = subprocess.run([sys.executable, "-m", "verl_ascend", "gate", str(metrics), "--baseline",
                           str(REPO / "recipe" / "dapo_ascend" / "baselines" / "dapo_demo_cpu_2steps.yaml")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "gate: PASS (3 gated metric(s) within tolerance)" in gate.stdout, gate.stdout
    assert (metrics.parent / "regression_gate.png").is_file()
