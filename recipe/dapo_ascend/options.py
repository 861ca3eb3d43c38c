"""Typed view of the recipe's own trainer section, ``trainer.v1.dapo_ascend``, parsed in one place.

``rollout_tail`` has its own dataclass (``rollout_tail/policy.py::TailPolicy``); this adds the
section's other keys. The trainer builds it once in its ``__init__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

SECTION = "trainer.v1.dapo_ascend"


@dataclass(frozen=True)
class DapoAscendOptions:
    # How often the replay buffer checks for finished rollouts; None keeps upstream's 2 s.
    poll_interval_s: Optional[float] = None
    # Score rule-based rewards inside the agent-loop worker instead of in reward actors
    # (recipe/dapo_ascend/local_reward.py).
    reward_in_agent_loop: bool = False

    @classmethod
    def from_config(cls, config: Any) -> "DapoAscendOptions":
        from omegaconf import OmegaConf

        from verl_ascend.envs import parse_bool

        in_loop = OmegaConf.select(config, f"{SECTION}.reward_in_agent_loop", default=False)
        in_loop = parse_bool(f"{SECTION}.reward_in_agent_loop", in_loop if in_loop is not None else False)
        raw = OmegaConf.select(config, f"{SECTION}.poll_interval_s", default=None)
        if raw is None:
            return cls(reward_in_agent_loop=in_loop)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not value > 0:
            raise ValueError(f"{SECTION}.poll_interval_s={raw!r}: expected a number > 0 (seconds)")
        return cls(poll_interval_s=value, reward_in_agent_loop=in_loop)
