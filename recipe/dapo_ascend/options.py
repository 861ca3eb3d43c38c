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
    # Ray workers that import verl while the run starts (verl_ascend/run/warm_workers.py); 0: off.
    warm_workers: int = 0

    @classmethod
    def from_config(cls, config: Any) -> "DapoAscendOptions":
        from omegaconf import OmegaConf

        from verl_ascend.envs import parse_bool

        in_loop = OmegaConf.select(config, f"{SECTION}.reward_in_agent_loop", default=False)
        in_loop = parse_bool(f"{SECTION}.reward_in_agent_loop", in_loop if in_loop is not None else False)
        warm = _non_negative_int(f"{SECTION}.warm_workers", OmegaConf.select(config, f"{SECTION}.warm_workers", default=0))
        raw = OmegaConf.select(config, f"{SECTION}.poll_interval_s", default=None)
        if raw is None:
            return cls(reward_in_agent_loop=in_loop, warm_workers=warm)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not value > 0:
            raise ValueError(f"{SECTION}.poll_interval_s={raw!r}: expected a number > 0 (seconds)")
        return cls(poll_interval_s=value, reward_in_agent_loop=in_loop, warm_workers=warm)


def _non_negative_int(key: str, raw: Any) -> int:
    from verl_ascend.run.warm_workers import MAX_WARM_WORKERS

    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_WARM_WORKERS:
        raise ValueError(f"{key}={raw!r}: expected an integer from 0 (off) to {MAX_WARM_WORKERS}")
    return raw
