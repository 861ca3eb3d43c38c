"""The recipe in upstream's async trainer modes, really run: ``trainer.v1.trainer_mode=colocate_async|separate_async``.

Each run is the documented command with nothing added but the mode (and a short run), on the local Ray
cluster, with the hf rollout server and with vLLM's CPU build. Checked where it shows:
- every step trained once and logged the recipe's metrics (its hooks ran in upstream's class: the
  per-step accuracy, agent-loop timings) next to upstream's staleness of the trained samples;
- separate_async moved the weights through the CPU platform's gloo engine every step (its metrics),
  and the run journal ended ``finished``;
- kill -9 of the whole separate_async run mid-training, then the same command: it resumes from the
  last whole checkpoint, each step's metrics appear once, and no prompt is taken from the dataloader twice.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest

from tests.recipe.fault_helpers import RecipeRun, read_json, read_jsonl, recipe_env, train_steps, vllm_env
from verl_ascend.run import files

pytestmark = pytest.mark.e2e
START_TIMEOUT = 600
NEEDS_VLLM = pytest.mark.skipif(importlib.util.find_spec("vllm") is None and not os.environ.get("CI"),
                                reason="vLLM's CPU build not installed (make vllm)")


def _train(tiny_dir, out: Path, mode: str, steps: int, *extra: str, rollout: str = "hf") -> tuple[int, str, list]:
    env = recipe_env(tiny_dir, out)
    if rollout == "vllm":
        env = vllm_env(env)
    overrides = [f"trainer.v1.trainer_mode={mode}", f"trainer.total_training_steps={steps}", *extra]
    if rollout != "hf":
        overrides.append(f"actor_rollout_ref.rollout.name={rollout}")
    run = RecipeRun(overrides, env, out / f"{mode}.log", config_name="dapo_demo_cpu")
    code = run.wait(START_TIMEOUT + 300 * steps)
    return code, run.output(), read_jsonl(out / "dapo_tiny_cpu" / "metrics.jsonl")


def _check_trained(code, log, metrics, mode, steps):
    assert code == 0, log[-4000:]
    train = [m for m in metrics if "critic/score/mean" in m.get("data", {})]
    assert [m["step"] for m in train] == list(range(1, steps + 1)), log[-3000:]
    for m in train:
        d = m["data"]
        # the recipe's hooks ran inside upstream's class for the mode
        assert not math.isnan(d["reward_extra/acc/mean"]) and 0 <= d["reward_extra/acc/mean"] <= 1
        assert "agent_loop/generate_sequences/mean" in d
        # upstream's off-policy accounting: in [0, the staleness bound]
        assert 0 <= d["training/off_policy/trajectory_staleness/max"] <= 1
    if mode == "separate_async":
        for m in train:
            assert m["data"]["weight_sync/gloo_tensors"] > 0 and m["data"]["weight_sync/gloo_megabytes"] > 0
    assert f"[verl-ascend] step {steps}/{steps}" in log and "stale " in log
    # upstream's task runner printed the config with the user's mode, not the recipe's registry name
    assert f"'trainer_mode': '{mode}'" in log and "'trainer_mode': 'dapo_ascend" not in log
    return train


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_async_mode_trains_with_the_recipes_hooks_on_hf(tiny_dir, tmp_path, mode):
    code, log, metrics = _train(tiny_dir, tmp_path, mode, 3)
    _check_trained(code, log, metrics, mode, 3)
    status = read_json(tmp_path / "dapo_tiny_cpu" / files.STATUS_FILE)
    assert status["phase"] == "finished" and status["step"] == 3


@NEEDS_VLLM
@pytest.mark.slow  # the hf cases above run both async modes in CI (make test-e2e-full runs these)
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_async_mode_trains_with_the_recipes_hooks_on_vllm(tiny_dir, tmp_path, mode):
    code, log, metrics = _train(tiny_dir, tmp_path, mode, 2, rollout="vllm")
    _check_trained(code, log, metrics, mode, 2)


@NEEDS_VLLM
def test_separate_async_recomputed_old_log_probs_match_the_rollout_at_staleness_0(tiny_dir, tmp_path):
    """Old log-probs recomputed (``bypass_mode=false``), four local updates a step (the demo's
    ``parameter_sync_step=4``), samples bounded to the weights of their own step
    (``max_off_policy_threshold=1``: one model version, staleness 0). Every local update after the first
    restores π_old, the weights vLLM sampled with, so the recomputation agrees with vLLM's own log-probs to
    float noise. Before the CPU copy of π_old (seam ``cpu_sharded_snapshot_copies``): 0.96 at step 1."""
    code, log, metrics = _train(
        tiny_dir, tmp_path, "separate_async", 3, "algorithm.rollout_correction.bypass_mode=false",
        "trainer.v1.sampler.max_off_policy_threshold=1",
        # each old-log-prob pass sees 8 / 4 prompts x 16 samples = 32 responses (the doctor checks it)
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32", rollout="vllm",
    )
    train = _check_trained(code, log, metrics, "separate_async", 3)
    assert "'parameter_sync_step': 4" in log
    for m in train:
        d = m["data"]
        assert d["training/off_policy/trajectory_staleness/max"] == 0, (m["step"], d)
        assert d["training/rollout_probs_diff_valid"] == 1
        assert d["training/rollout_probs_diff_max"] < 1e-4, (m["step"], d["training/rollout_probs_diff_max"])
        assert "actor/entropy" in d  # the recomputation pass ran (it returns the entropy; bypass mode has none)


def test_separate_async_killed_and_rerun_loses_nothing(tiny_dir, tmp_path):
    """SIGKILL of every process of the run once step 2's checkpoint exists, then the same command."""
    steps = 4
    env = recipe_env(tiny_dir, tmp_path)
    overrides = ["trainer.v1.trainer_mode=separate_async", f"trainer.total_training_steps={steps}", "trainer.save_freq=1"]
    ckpt = tmp_path / "checkpoints" / "dapo_tiny_cpu"
    run = RecipeRun(overrides, env, tmp_path / "first.log", config_name="dapo_demo_cpu")
    try:
        run.wait_for(lambda: 3 in train_steps(tmp_path / "dapo_tiny_cpu") or None, START_TIMEOUT + 600)
    finally:
        killed = run.kill_tree()
    assert killed > 5  # the driver, Ray's processes and the workers: the whole tree
    assert train_steps(tmp_path / "dapo_tiny_cpu")[-1] < steps, "the first run ended before the kill"

    run = RecipeRun(overrides, env, tmp_path / "second.log", config_name="dapo_demo_cpu")
    code = run.wait(START_TIMEOUT + 600)
    log = run.output()
    assert code == 0, log[-4000:]
    assert "resuming after step" in log
    assert train_steps(tmp_path / "dapo_tiny_cpu") == list(range(1, steps + 1))  # each step's metrics once
    resumed = [r["resume_step"] for r in read_jsonl(tmp_path / "dapo_tiny_cpu" / files.RESUME_LOG)]
    assert resumed[0] == 0 and resumed[1] >= 2, resumed
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(steps)
    records = read_jsonl(tmp_path / "dapo_tiny_cpu" / files.PROMPTS_FILE)
    taken = [i for r in records for i in r["index"]]
    assert len(taken) == len(set(taken)), "a prompt was taken from the dataloader twice"
