"""The recipe's Hydra configs, composed without ``@hydra.main``: ``verl_ascend.run.config_utils`` bound to
this recipe's ``config/`` folder (dry run, doctor CLI, tests)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from verl_ascend.run import config_utils as _compose
from verl_ascend.run.config_utils import ConfigError, legacy_override_message

__all__ = ["CONFIG_DIR", "ConfigError", "available_configs", "compose", "legacy_override_message"]

CONFIG_DIR = Path(__file__).resolve().parent / "config"


def available_configs(config_dir: str | Path = CONFIG_DIR) -> list[str]:
    return _compose.available_configs(config_dir)


def compose(config_name: str, overrides: Sequence[str] = (), config_dir: str | Path = CONFIG_DIR) -> DictConfig:
    """The config ``config_name`` of this recipe with Hydra ``overrides`` applied (see ``verl_ascend.run.config_utils``)."""
    return _compose.compose(config_name, overrides, config_dir)
