"""``dapo_ascend``: upstream's synchronous V1 trainer plus the metrics DAPO users read.

Registered with upstream's ``register_trainer`` and selected by
``trainer.v1.trainer_mode=dapo_ascend`` (the recipe's default). It changes no algorithm:
it adds, per step, the means of the reward manager's extra fields (``acc``, and with
``overlong_buffer_cfg.log=true`` the DAPO overlong penalty) as ``reward_extra/<key>/mean``,
which upstream's V1 trainer computes but logs only during validation.
"""

from __future__ import annotations

import numbers

import numpy as np
import transfer_queue as tq

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

TRAINER_NAME = "dapo_ascend"


def reward_extra_means(extra_fields: list, mask: np.ndarray | None = None) -> dict[str, float]:
    """Mean of every numeric/bool ``reward_extra_info`` entry over the rows kept by ``mask``."""
    values: dict[str, list[float]] = {}
    for i, fields in enumerate(extra_fields):
        if mask is not None and not mask[i]:
            continue
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        for key, value in (info or {}).items():
            # Upstream's dapo manager returns tensors for some entries (overlong_reward).
            if isinstance(value, (bool, np.bool_, numbers.Number)) or getattr(value, "numel", lambda: 0)() == 1:
                values.setdefault(key, []).append(float(value))
    return {f"reward_extra/{key}/mean": float(np.mean(v)) for key, v in values.items() if v}


@register_trainer(TRAINER_NAME)
class DAPOAscendTrainer(PPOTrainerSync):
    def __init__(self, config):
        # Upstream's base trainer branches on ``trainer_mode == "sync"`` (replay buffer, refill
        # rules, checkpoint contents); any other name is treated as asynchronous. The registry
        # has already resolved our name to this class, so from here on we are plain "sync".
        config.trainer.v1.trainer_mode = "sync"
        super().__init__(config)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        mask = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        metrics.update(reward_extra_means(data.pop("extra_fields").tolist(), mask))
