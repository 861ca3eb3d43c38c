"""Typed views of the run machinery's own config sections, each parsed in one place.

``fault_tolerance`` (recipe configs, ``dapo_base.yaml``) is read by the watchdog in the trainer
process and by the run guard in the driver; both build this dataclass from the config instead of
selecting keys one by one, so a key's name, type and default are written once. Booleans go
through the distribution's one parser (``verl_ascend.envs.parse_bool``), so ``start_over: "no"``
means no, and an unreadable value names the key.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from verl_ascend.envs import parse_bool


@dataclass(frozen=True)
class FaultTolerance:
    """``fault_tolerance.*``: when a rollout counts as failed, and what a start may overwrite."""

    rollout_timeout_s: float = 1800.0  # no rollout progress for this long fails the step; 0 = off
    server_ping_timeout_s: float = 60.0  # a ping unanswered this long marks a server unresponsive
    allow_no_checkpoints: bool = False  # trainer.save_freq <= 0 is refused unless true
    start_over: bool = False  # a start that would resume nothing on top of earlier records: refused unless true
    check_free_space: bool = True  # refuse a checkpoint folder without room for one checkpoint
    new_data_order: bool = False  # resume on changed training data: a fresh data order (else refused)

    @classmethod
    def from_config(cls, config: Any) -> "FaultTolerance":
        from omegaconf import OmegaConf

        values = {}
        for f in fields(cls):
            key = f"fault_tolerance.{f.name}"
            raw = OmegaConf.select(config, key, default=None)
            if raw is None:
                continue
            if f.type in ("bool", bool):
                values[f.name] = parse_bool(key, raw)
            else:
                try:
                    values[f.name] = float(raw)
                except (TypeError, ValueError):
                    raise ValueError(f"{key}={raw!r}: expected a number of seconds") from None
        return cls(**values)
