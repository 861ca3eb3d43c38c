"""Typed view of the recipe's own trainer section, ``trainer.v1.dapo_ascend``, parsed in one place.

``rollout_tail`` has its own dataclass (``rollout_tail/policy.py::TailPolicy``); this adds the
section's other key. The trainer builds it once in its ``__init__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

SECTION = "trainer.v1.dapo_ascend"


@dataclass(frozen=True)
class DapoAscendOptions:
    # How often the replay buffer checks for finished rollouts; None keeps upstream's 2 s.
    poll_interval_s: Optional[float] = None

    @classmethod
    def from_config(cls, config: Any) -> "DapoAscendOptions":
        from omegaconf import OmegaConf

        raw = OmegaConf.select(config, f"{SECTION}.poll_interval_s", default=None)
        if raw is None:
            return cls()
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not value > 0:
            raise ValueError(f"{SECTION}.poll_interval_s={raw!r}: expected a number > 0 (seconds)")
        return cls(poll_interval_s=value)
