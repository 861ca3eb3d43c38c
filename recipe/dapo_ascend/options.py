"""The recipe's own trainer section, ``trainer.v1.dapo_ascend``, declared once (``verl_ascend/sections.py``).

``rollout_tail`` has its own dataclass (``rollout_tail/policy.py::TailPolicy``); this declares the
section's other keys. The trainer builds it once in its ``__init__``; the pre-Ray schema, the YAML test
and the docs' key table derive from the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl_ascend.run.warm_workers import MAX_WARM_WORKERS
from verl_ascend.sections import Section, boolean, int_in, key, positive_number

SECTION = "trainer.v1.dapo_ascend"


@dataclass(frozen=True)
class DapoAscendOptions(Section):
    SECTION = SECTION
    OWNED_ELSEWHERE = ("rollout_tail",)  # rollout_tail/policy.py::TailPolicy

    # How often the replay buffer checks for finished rollouts; null keeps upstream's 2 s.
    poll_interval_s: Optional[float] = key(0.2, "a number > 0 (seconds)", positive_number, null="upstream's 2 s")
    # Score rule-based rewards inside the agent-loop worker instead of in reward actors
    # (recipe/dapo_ascend/local_reward.py).
    reward_in_agent_loop: bool = key(False, "true or false", boolean)
    # Ray workers that import verl while the run starts (verl_ascend/run/warm_workers.py); 0: off.
    warm_workers: int = key(0, f"an integer from 0 (off) to {MAX_WARM_WORKERS}", int_in(0, MAX_WARM_WORKERS))
