"""The recipe's Hydra configs, composed without ``@hydra.main``: ``verl_ascend.run.config_utils`` bound to
this recipe's ``config/`` folder (dry run, doctor CLI, tests)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from verl_ascend.run import config_utils as _compose
from verl_ascend.run.config_utils import ConfigError, ConfigFolder, legacy_override_message

__all__ = ["CONFIG_DIR", "CONFIGS", "ConfigError", "available_configs", "compose", "legacy_override_message", "legacy_report"]

CONFIG_DIR = Path(__file__).resolve().parent / "config"
# This recipe's configs for commands outside it (entry point verl_ascend.configs in setup.py):
# ``python -m verl.ascend.env`` composes ``dapo_base`` unless told otherwise.
CONFIGS = ConfigFolder(CONFIG_DIR, base="dapo_base")


def available_configs(config_dir: str | Path = CONFIG_DIR) -> list[str]:
    return _compose.available_configs(config_dir)


def compose(config_name: str, overrides: Sequence[str] = (), config_dir: str | Path = CONFIG_DIR) -> DictConfig:
    """The config ``config_name`` of this recipe with Hydra ``overrides`` applied (see ``verl_ascend.run.config_utils``)."""
    return _compose.compose(config_name, overrides, config_dir)


def legacy_report(config_name: str, overrides: Sequence[str], config_dir: str | Path = CONFIG_DIR) -> str | None:
    """With upstream's old reward keys among ``overrides``: one report of every culprit -- where each
    legacy key lives now, then the checks' findings on the config the other overrides compose -- so a
    user who fixes them does not meet the next refusal on a second try. None without legacy keys."""
    from verl_ascend import checks
    from verl_ascend.checks.findings import ERROR, Finding
    from verl_ascend.checks.pipeline import keys_named
    from verl_ascend.run.config_utils import legacy_overrides

    message = legacy_override_message(overrides)
    if message is None:
        return None
    kept, _moves = legacy_overrides(overrides)
    legacy = Finding("legacy_reward_keys_ignored", ERROR, message, keys_named(message))
    try:
        findings = [legacy, *checks.validate(compose(config_name, kept, config_dir))]
    except ConfigError as exc:  # the rest does not compose either: say so in the same report
        findings = [legacy, Finding("config_not_composed", ERROR, str(exc))]
    return checks.format_report(findings, strict=False)
