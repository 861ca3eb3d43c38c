"""What the trained batch cost in staleness: per-step metrics from the responses' version spans.

Weight version ``v`` means "the weights after training step ``v``"; step ``s`` samples with
version ``s - 1`` (upstream's trainer pushes weights at the end of every step and once at
start-up). A token generated under an older version is off-policy for the step that trains it.
"""

from __future__ import annotations

import numpy as np

from recipe.dapo_ascend.rollout_tail.sampler import PREFIX


def consumption_metrics(extra_fields: list, mask, step: int) -> dict[str, float]:
    """``rollout_tail/*`` metrics of the trajectories trained at ``step`` (rows kept by ``mask``)."""
    current = step - 1
    staleness, carried, total, resumed = [], 0, 0, 0
    for i, fields in enumerate(extra_fields):
        if mask is not None and not mask[i]:
            continue
        extra = fields if isinstance(fields, dict) else {}
        oldest = extra.get("min_global_steps")
        if oldest is not None:
            staleness.append(max(0, current - int(oldest)))
        tail = extra.get("rollout_tail") or {}
        for start, end, version in tail.get("spans") or []:
            total += int(end) - int(start)
            if version is not None and int(version) < current:
                carried += int(end) - int(start)
        resumed += int(bool(tail.get("aborts")))
    metrics = {
        f"{PREFIX}/carried_tokens": float(carried),
        f"{PREFIX}/resumed_responses": float(resumed),
        f"{PREFIX}/off_policy_token_fraction": carried / total if total else 0.0,
    }
    if staleness:
        metrics[f"{PREFIX}/staleness/mean"] = float(np.mean(staleness))
        metrics[f"{PREFIX}/staleness/max"] = float(np.max(staleness))
    return metrics
