"""Read-only, forgiving access to a composed config for the doctor's rules.

Rules must run on any config a user can compose (our recipe's, upstream's plain ``ppo_trainer``,
a hand-edited one): a missing key, an unresolvable interpolation or a ``???`` must read as
"not set", never crash the doctor. The derived quantities several rules share (world size,
whether a reference model runs) are computed here once, the way upstream 0.9.1 computes them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

ACTOR = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
ROLLOUT = "actor_rollout_ref.rollout"


class ConfigView:
    def __init__(self, config: Any, environ: Mapping[str, str] | None = None):
        if not isinstance(config, DictConfig):
            config = OmegaConf.create(config)
        self.config = config
        self.environ = dict(os.environ if environ is None else environ)

    def get(self, key: str, default: Any = None) -> Any:
        """The resolved value at dotted ``key``, or ``default`` when absent/unresolvable/missing."""
        value = OmegaConf.select(self.config, key, default=default, throw_on_resolution_failure=False)
        if isinstance(value, DictConfig) or OmegaConf.is_list(value):
            return OmegaConf.to_container(value, resolve=True, throw_on_missing=False)
        return value

    def has(self, key: str) -> bool:
        sentinel = object()
        return OmegaConf.select(self.config, key, default=sentinel, throw_on_resolution_failure=False) is not sentinel

    def get_int(self, key: str, default: int | None = None) -> int | None:
        value = self.get(key, default)
        if isinstance(value, bool):
            return default
        try:
            return int(value) if value is not None else default
        except (TypeError, ValueError):
            return default

    def get_bool(self, key: str, default: bool = False) -> bool:
        from verl_ascend.envs import parse_bool

        value = self.get(key, default)
        if isinstance(value, str):
            try:
                return parse_bool(key, value)
            except ValueError:  # the schema rules report unreadable values; here it is just "not on"
                return False
        return bool(value) if value is not None else default

    # --- quantities several rules need -------------------------------------------------------

    @property
    def world_size(self) -> int:
        return (self.get_int("trainer.nnodes", 1) or 1) * (self.get_int("trainer.n_gpus_per_node", 1) or 1)

    @property
    def cards_per_node(self) -> int:
        return self.get_int("trainer.n_gpus_per_node", 1) or 1

    @property
    def uses_reference_model(self) -> bool:
        # Same test as upstream's verl.trainer.ppo.utils.need_reference_policy.
        return self.get_bool("algorithm.use_kl_in_reward") or self.get_bool(f"{ACTOR}.use_kl_loss")

    @property
    def uses_critic(self) -> bool:
        # Same test as upstream's verl.trainer.ppo.utils.need_critic.
        enable = self.get("critic.enable")
        return bool(enable) if enable is not None else self.get("algorithm.adv_estimator") == "gae"

    def role_runs(self, key: str) -> bool:
        """Whether the role a key belongs to is built at all (no reference policy without KL, no critic without GAE)."""
        if key.startswith(REF + "."):
            return self.uses_reference_model
        if key.startswith("critic."):
            return self.uses_critic
        return True

    @property
    def uses_v1_trainer(self) -> bool:
        return self.get_bool("trainer.use_v1", True)

    @property
    def sequence_budget(self) -> int | None:
        """prompt + response tokens: the longest sequence a step can produce."""
        prompt = self.get_int("data.max_prompt_length")
        response = self.get_int("data.max_response_length")
        return None if prompt is None or response is None else prompt + response

    @property
    def ulysses_size(self) -> int:
        return max(
            self.get_int(f"{ACTOR}.ulysses_sequence_parallel_size", 1) or 1,
            self.get_int(f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size", 1) or 1,
        )

    def training_roles(self) -> list[str]:
        """Config prefixes of the FSDP roles that actually run (the ref only when KL needs it)."""
        return [ACTOR, REF] if self.uses_reference_model else [ACTOR]
