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
