"""The recipe's seed and async defaults, as a user's config composes them and the dry run shows them.

``data.seed`` is the one seed (dapo_base.yaml): the rollout's seed follows it in every shipped config, so a
user who sets one seed changes both the data order and the sampling (tests/recipe/test_seeds_e2e.py runs it).
"""

from __future__ import annotations

import pytest

from recipe.dapo_ascend.main_dapo import RECIPE

SHIPPED = ("dapo_demo_cpu", "dapo_tiny_cpu", "dapo_tail_cpu", "dapo_qwen25_32b_npu")


@pytest.mark.parametrize("config", SHIPPED)
def test_data_seed_seeds_the_rollout(config):
    composed = RECIPE.compose(config)
    assert composed.data.seed == 1 and composed.actor_rollout_ref.rollout.seed == 1
    moved = RECIPE.compose(config, ["data.seed=7"])
    assert moved.data.seed == 7 and moved.actor_rollout_ref.rollout.seed == 7


# The async defaults the parity study supports (docs/ascend_tutorial/async_training.md, "The defaults that follow").
BOUND = 1  # staleness bound: max_off_policy_threshold = BOUND + 1 versions a trajectory may span
ASYNC = ("colocate_async", "separate_async")


@pytest.mark.parametrize("mode", ASYNC)
@pytest.mark.parametrize("config", ("dapo_demo_cpu", "dapo_qwen25_32b_npu"))
def test_the_dry_run_shows_the_study_backed_async_defaults(config, mode):
    from verl_ascend.checks import effective

    overrides = [f"trainer.v1.trainer_mode={mode}"] + (["+pools=npu_separate_128"] if config.endswith("npu")
                                                       and mode == "separate_async" else [])
    shown = effective.mode_settings(RECIPE.compose(config, overrides))
    assert shown["staleness bound (trainer.v1.sampler.max_off_policy_threshold)"] == BOUND + 1
    correction = shown["rollout correction (algorithm.rollout_correction)"]
    assert correction.startswith("off; old policy")
    assert ("bypass_mode=true" in correction) == (config == "dapo_demo_cpu")
    lines = effective.render(RECIPE.compose(config, overrides))
    assert f"staleness bound (trainer.v1.sampler.max_off_policy_threshold): {BOUND + 1}" in lines
