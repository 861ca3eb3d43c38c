"""Bad input fails before any Ray actor starts, names the culprit, exits non-zero, writes nothing.

The entry point runs in this process (``entry``, tests/recipe/conftest.py); Ray is a stub that must
never be called. A key Hydra cannot override is refused by Hydra's own launch, before our code: that
case stays a subprocess (marker ``e2e``).
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.recipe.helpers import run_recipe


def _assert_refused(result, *needles, out_dir, code=2):
    assert result.returncode == code, (result.stdout + result.stderr)[-3000:]
    for needle in needles:
        assert needle in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (out_dir / "out").exists()  # nothing written: no run folder, no checkpoints


def test_missing_model_path(entry, tmp_path):
    r = entry("actor_rollout_ref.model.path=/nonexistent/model")
    _assert_refused(r, "actor_rollout_ref.model.path", "/nonexistent/model", "does not exist", out_dir=tmp_path)
    assert entry.started == []


def test_dataset_row_without_ground_truth(entry, tiny_dir, tmp_path):
    df = pd.read_parquet(tiny_dir / "data" / "train.parquet").head(20)
    df.at[13, "reward_model"] = {"style": "rule"}
    bad = tmp_path / "bad.parquet"
    df.to_parquet(bad)
    before = bad.read_bytes()
    r = entry(f"data.train_files={bad}")
    _assert_refused(r, str(bad), "row 13", "ground_truth", out_dir=tmp_path)
    assert bad.read_bytes() == before and entry.started == []


def test_dataset_missing_prompt_column(entry, tiny_dir, tmp_path):
    df = pd.read_parquet(tiny_dir / "data" / "train.parquet").head(5).drop(columns=["prompt"])
    bad = tmp_path / "noprompt.parquet"
    df.to_parquet(bad)
    r = entry(f"data.train_files={bad}")
    _assert_refused(r, "lacks column", "'prompt'", out_dir=tmp_path)
    assert entry.started == []


@pytest.mark.e2e
def test_unknown_override_key(tiny_dir, tmp_path):
    """Hydra refuses a key the config does not have (its own error, status 1) before the config exists."""
    r = run_recipe(["actor_rollout_ref.actor.clip_ratio_highest=0.3"], tiny_dir, tmp_path / "out")
    _assert_refused(r, "clip_ratio_highest", out_dir=tmp_path, code=1)


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4"], ["data.train_batch_size=10", "ppo_mini_batch_size=4"]),
        (["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=7"], ["ppo_micro_batch_size_per_gpu=7"]),
    ],
)
def test_batch_sizes_that_cannot_divide(entry, tmp_path, overrides, needles):
    r = entry(*overrides)
    _assert_refused(r, *needles, out_dir=tmp_path)
    assert entry.started == []
