"""Rule-based rewards scored inside the agent-loop worker, not in a reward actor.

Upstream scores every sample with a Ray call to a ``RewardLoopWorker`` actor
(``agent_loop.py``: ``await handle.compute_score.remote(data)``), which pickles the sample's
``DataProto`` there and the result back. For a rule-based reward (a Python function, no reward
model) that call is nearly all the cost: on the 2-core demo machine the reward actor used a
third of a core during rollouts, for a function that compares two digits.

``InProcessRewardHandle`` is what the trainer hands to the agent loops instead
(``trainer.v1.dapo_ascend.reward_in_agent_loop``). It answers the one call upstream makes on a
reward handle, ``compute_score.remote(data)``, with an awaitable, and builds upstream's own
``RewardLoopWorker`` class in the agent-loop process the first time it is used: the same reward
manager, reward function and ``reward_extra_info``, without the actor or the round trip.

Seam ``recipe_reward_in_agent_loop`` (with ``DAPOAscendHooks.get_reward_handles``): on with
``trainer.v1.dapo_ascend.reward_in_agent_loop=true`` (dapo_demo_cpu; off in dapo_base); goes when upstream can
score rule-based rewards in the agent loop itself.
"""

from __future__ import annotations

from typing import Any

KEY = "trainer.v1.dapo_ascend.reward_in_agent_loop"


class _Method:
    """``handle.<name>.remote(...)`` -> the coroutine of the local worker's method."""

    def __init__(self, owner: "InProcessRewardHandle", name: str):
        self._owner = owner
        self._name = name

    def remote(self, *args: Any, **kwargs: Any):
        return getattr(self._owner.worker(), self._name)(*args, **kwargs)


class InProcessRewardHandle:
    """Stands in for one reward actor handle; pickled to the agent-loop worker, built there."""

    def __init__(self, config: Any):
        self._config = config
        self._worker = None

    def worker(self):
        if self._worker is None:
            from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

            self._worker = RewardLoopWorker(self._config, None)
        return self._worker

    @property
    def compute_score(self) -> _Method:
        return _Method(self, "compute_score")

    def __getstate__(self) -> dict:
        return {"_config": self._config, "_worker": None}  # the worker is built where it is used


def check_in_process_reward(config: Any) -> None:
    """A reward model needs its own servers: refuse the switch with one, naming both keys."""
    from omegaconf import OmegaConf

    if OmegaConf.select(config, "reward.reward_model.enable", default=False):
        raise ValueError(
            f"{KEY}=true scores rule-based rewards in the agent loop, but reward.reward_model.enable=true "
            "asks for a reward model; set one of them to false."
        )


def release_reward_workers(config: Any) -> int:
    """Before upstream builds the reward actors: ask for none, as their work moves in-process.

    Returns the ``reward.num_workers`` the config had, for the log line that says so.
    """
    from omegaconf import open_dict

    before = int(config.reward.get("num_workers", 0) or 0)
    with open_dict(config):
        config.reward.num_workers = 0
    return before
