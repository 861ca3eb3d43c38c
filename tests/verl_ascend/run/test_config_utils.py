"""The one Hydra composer: a base config composes with upstream's configs on its search path, and a command
outside the recipe finds the recipe's declaration through the entry-point group ``verl_ascend.recipes``."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_ascend.run import config_utils

REPO = Path(__file__).resolve().parents[3]


def test_a_base_config_composes_on_upstream_configs_and_overrides_apply():
    """dapo_base names no hydra.searchpath of its own (Hydra reads it only in a primary config)."""
    config = config_utils.compose("dapo_base", ["trainer.total_training_steps=7"], REPO / "recipe/dapo_ascend/config")
    assert config.trainer.total_training_steps == 7
    assert config.algorithm.adv_estimator == "grpo"  # the recipe's value over upstream's gae
    assert "ppo_mini_batch_size" in config.actor_rollout_ref.actor  # upstream's ppo_trainer underneath


def test_the_recipe_declares_its_folder_and_configs():
    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend.launch import registered_recipe

    recipe = registered_recipe()
    assert recipe is RECIPE and recipe.config_dir == REPO / "recipe/dapo_ascend/config"
    for name in (recipe.base_config, recipe.default_config):
        assert (recipe.config_dir / f"{name}.yaml").is_file()
    assert recipe.external_module == "recipe.dapo_ascend.register" and recipe.trainers["sync"] == "dapo_ascend"


class _EntryPoint:
    def __init__(self, name, value):
        self.name, self.value = name, value

    def load(self):
        return self.value


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ([], "0 recipes installed (entry points verl_ascend.recipes: none); pass --config-dir"),
        ([("a", None), ("b", None)], "2 recipes installed (entry points verl_ascend.recipes: a, b)"),
        ([("bad", "config/")], "entry point verl_ascend.recipes bad is 'config/', not a Recipe"),
    ],
)
def test_no_single_recipe_is_an_error_naming_the_entry_points(monkeypatch, declared, message):
    import importlib.metadata

    from verl_ascend.launch import registered_recipe

    points = [_EntryPoint(n, v) for n, v in declared]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: points if group == "verl_ascend.recipes" else [])
    with pytest.raises(ValueError) as info:
        registered_recipe()
    assert message in str(info.value)
