"""Bad input fails before any Ray actor starts, names the culprit, exits non-zero, writes nothing."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.recipe.helpers import run_recipe

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)


def _assert_refused(result, *needles, out_dir):
    assert result.returncode != 0, result.stdout[-2000:]
    text = result.stderr + result.stdout
    for needle in needles:
        assert needle in text, text[-3000:]
    assert "ray init kwargs" not in result.stdout  # Ray never started
    assert not (out_dir / "checkpoints").exists()


def test_missing_model_path(tiny_dir, tmp_path):
    r = run_recipe(["actor_rollout_ref.model.path=/nonexistent/model"], tiny_dir, tmp_path)
    _assert_refused(r, "actor_rollout_ref.model.path", "/nonexistent/model", "does not exist", out_dir=tmp_path)
    assert r.returncode == 2


def test_dataset_row_without_ground_truth(tiny_dir, tmp_path):
    df = pd.read_parquet(tiny_dir / "data" / "train.parquet").head(20)
    df.at[13, "reward_model"] = {"style": "rule"}
    bad = tmp_path / "bad.parquet"
    df.to_parquet(bad)
    r = run_recipe([f"data.train_files={bad}"], tiny_dir, tmp_path)
    _assert_refused(r, str(bad), "row 13", "ground_truth", out_dir=tmp_path)


def test_dataset_missing_prompt_column(tiny_dir, tmp_path):
    df = pd.read_parquet(tiny_dir / "data" / "train.parquet").head(5).drop(columns=["prompt"])
    bad = tmp_path / "noprompt.parquet"
    df.to_parquet(bad)
    r = run_recipe([f"data.train_files={bad}"], tiny_dir, tmp_path)
    _assert_refused(r, "lacks column", "'prompt'", out_dir=tmp_path)


def test_unknown_override_key(tiny_dir, tmp_path):
    r = run_recipe(["actor_rollout_ref.actor.clip_ratio_highest=0.3"], tiny_dir, tmp_path)
    _assert_refused(r, "clip_ratio_highest", out_dir=tmp_path)


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4"], ["data.train_batch_size=10", "ppo_mini_batch_size=4"]),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=7"], ["ppo_micro_batch_size_per_gpu=7"]),
    ],
)
def test_batch_sizes_that_cannot_divide(tiny_dir, tmp_path, overrides, needles):
    r = run_recipe(overrides, tiny_dir, tmp_path)
    _assert_refused(r, *needles, out_dir=tmp_path)
    assert r.returncode == 2
