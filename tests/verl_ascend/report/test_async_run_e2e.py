"""End to end: a profiled separate_async run of the demo on a CPU, both pools traced, then the report.

`bash examples/dapo_tiny_cpu.sh +profile=cpu trainer.v1.trainer_mode=separate_async ...`: upstream's
separate_async trainer with the gloo weight-sync engine; +profile=cpu traces the actor (trainer pool)
and every rollout server, the trainer pool's hybrid replica and the standalone rollout pool's. The
trace check's expectation for that config must find a trace of each pool, and the report must put
the lanes on one time axis with the run's weight sync and staleness.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from tests.launch import require_e2e
from verl_ascend.run.trace_check import check_traces, expected_traces, find_traces, replicas_of

pytestmark = pytest.mark.e2e  # launches the recipe and a Ray cluster (tests/launch.py)

# What the CPU platform fills in for separate_async under upstream's main_ppo (verl/cpu/config_defaults.py);
# spelled out for the recipe's entry point.
SEPARATE = ["trainer.v1.trainer_mode=separate_async",
            "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
            "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl.cpu.checkpoint_engine",
            "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
            "ray_kwargs.ray_init.num_gpus=2"]


def _composed(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "recipe" / "dapo_ascend" / "config"), version_base=None):
        return compose(config_name="dapo_demo_cpu", overrides=overrides)


def test_separate_async_profiles_both_pools_and_reports_the_lanes(tmp_path):
    require_e2e("examples/dapo_tiny_cpu.sh trainer.v1.trainer_mode=separate_async +profile=cpu")
    out = tmp_path / "outputs"
    env = dict(os.environ, VERL_ASCEND_OUTPUT_DIR=str(out))
    for name in ("VERL_FILE_LOGGER_PATH", "VERL_ASCEND_PROFILE_DIR"):
        env.pop(name, None)
    overrides = ["+profile=cpu", *SEPARATE, "trainer.total_training_steps=3", "global_profiler.steps=[2]"]
    proc = subprocess.run(["bash", "examples/dapo_tiny_cpu.sh", *overrides], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-4000:]

    env_before = os.environ.get("VERL_ASCEND_OUTPUT_DIR")
    os.environ["VERL_ASCEND_OUTPUT_DIR"] = str(out)  # the profile config's save_path reads it
    try:
        cfg = _composed(overrides)
        save = Path(cfg.global_profiler.save_path)
    finally:
        if env_before is None:
            os.environ.pop("VERL_ASCEND_OUTPUT_DIR")
        else:
            os.environ["VERL_ASCEND_OUTPUT_DIR"] = env_before
    assert save == out / "profile" / "dapo_tiny_cpu"
    kinds = expected_traces(cfg)
    assert kinds == ["train", "rollout", "rollout_pool"]
    assert replicas_of(cfg, "rollout_pool") == range(1, 2)  # upstream numbers the pool after the trainer's replica
    assert find_traces(save, "rollout_pool", step=2, since=0.0, replicas=range(1, 2))
    assert check_traces(save, 2, kinds, strict=True, since=0.0, config=cfg) == []  # every pool's trace is there

    metrics = out / "dapo_tiny_cpu" / "metrics.jsonl"
    report_dir = tmp_path / "report"
    rep = subprocess.run([sys.executable, "-m", "verl_ascend", "report", str(save), str(metrics), "--out", str(report_dir)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stderr
    text = rep.stdout
    assert "7. Asynchronous modes: rollout and training on one time axis" in text
    assert "mode separate_async" in text and "from traces: 1 profiled window(s)" in text
    for lane in ("trainer pool / train", "trainer pool / rollout", "rollout pool / rollout"):
        assert lane in text
    assert "overlap (both pools busy)" in text and "trainer pool idle" in text and "rollout pool idle" in text
    assert "weight_sync/gloo_seconds" in text and "staleness (training/off_policy/trajectory_staleness)" in text
    assert (report_dir / "async_timeline.png").is_file()
