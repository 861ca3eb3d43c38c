"""The recipe's configs compose against upstream verl 0.9.1 and say DAPO exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "recipe" / "dapo_ascend" / "config")


def tiny(overrides=()):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="dapo_tiny_cpu", overrides=list(overrides))


def test_tiny_config_is_full_dapo():
    cfg = tiny()
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert actor.loss_agg_mode == "token-mean"
    assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False
    assert cfg.algorithm.filter_groups.enable is True and cfg.algorithm.filter_groups.metric == "acc"
    assert cfg.reward.reward_manager.name == "dapo"
    overlong = cfg.reward.reward_kwargs.overlong_buffer_cfg
    assert overlong.enable is True and overlong.len < cfg.data.max_response_length
    assert cfg.reward.reward_kwargs.max_resp_len == cfg.data.max_response_length
    assert cfg.actor_rollout_ref.rollout.name == "hf"
    assert cfg.trainer.v1.trainer_mode == "sync"  # upstream's value; the recipe's class runs it (modes.py)


def test_dapo_settings_are_written_once():
    """The hardware config adds sizes, never re-states the algorithm."""
    text = "".join((Path(CONFIG_DIR) / f).read_text() for f in ("tiny_cpu.yaml", "dapo_tiny_cpu.yaml", "dapo_tail_cpu.yaml"))
    for key in ("clip_ratio_high", "loss_agg_mode", "use_kl_loss", "adv_estimator", "reward_manager"):
        assert key not in text


def test_upstream_overrides_work_and_unknown_keys_fail():
    cfg = tiny(["data.max_response_length=12", "actor_rollout_ref.rollout.n=4", "+trainer.extra_key=1"])
    assert cfg.data.max_response_length == 12 and cfg.reward.reward_kwargs.max_resp_len == 12
    assert cfg.actor_rollout_ref.rollout.n == 4
    with pytest.raises(ConfigCompositionException, match="no_such_key"):
        tiny(["actor_rollout_ref.actor.no_such_key=1"])


def test_config_validates_against_upstream_dataclasses():
    from verl.utils.config import omega_conf_to_dataclass

    cfg = tiny()
    OmegaConf.resolve(cfg)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert actor.clip_ratio_high == 0.28 and rollout.name == "hf"
