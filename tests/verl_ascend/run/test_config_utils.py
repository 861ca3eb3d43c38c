"""The one Hydra composer: a base config composes with upstream's configs on its search path, and a command
outside the recipe finds the recipe's folder through the entry-point group ``verl_ascend.configs``."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_ascend.run import config_utils
from verl_ascend.run.config_utils import ConfigError, ConfigFolder

REPO = Path(__file__).resolve().parents[3]


def test_a_base_config_composes_on_upstream_configs_and_overrides_apply():
    """dapo_base names no hydra.searchpath of its own (Hydra reads it only in a primary config)."""
    config = config_utils.compose("dapo_base", ["trainer.total_training_steps=7"], REPO / "recipe/dapo_ascend/config")
    assert config.trainer.total_training_steps == 7
    assert config.algorithm.adv_estimator == "grpo"  # the recipe's value over upstream's gae
    assert "ppo_mini_batch_size" in config.actor_rollout_ref.actor  # upstream's ppo_trainer underneath


def test_the_recipe_declares_its_folder_and_base_config():
    from recipe.dapo_ascend import config_utils as recipe_configs

    folder = config_utils.registered_folder()
    assert folder == recipe_configs.CONFIGS == ConfigFolder(recipe_configs.CONFIG_DIR, "dapo_base")
    assert (folder.path / f"{folder.base}.yaml").is_file()


class _EntryPoint:
    def __init__(self, name, value):
        self.name, self.value = name, value

    def load(self):
        return self.value


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ([], "0 recipes declare a config folder (entry points verl_ascend.configs: none); pass --config-dir"),
        ([("a", None), ("b", None)], "2 recipes declare a config folder (entry points verl_ascend.configs: a, b)"),
        ([("bad", "config/")], "entry point verl_ascend.configs bad is 'config/', not a ConfigFolder"),
    ],
)
def test_no_single_declared_folder_is_an_error_naming_the_entry_points(monkeypatch, declared, message):
    import importlib.metadata

    points = [_EntryPoint(n, v) for n, v in declared]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: points if group == "verl_ascend.configs" else [])
    with pytest.raises(ConfigError) as info:
        config_utils.registered_folder()
    assert message in str(info.value)
