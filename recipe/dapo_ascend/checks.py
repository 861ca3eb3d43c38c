"""The DAPO recipe's own config checks, registered with ``verl_ascend.checks`` by the recipe.

Registered through the entry point ``verl_ascend.checks: dapo_ascend = recipe.dapo_ascend.checks:register_checks``
(setup.py), so every ``verl_ascend.checks.diagnose`` sees them without the neutral package importing the recipe.
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend import checks
from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.view import ConfigView

# The recipe's trainer (recipe/dapo_ascend/trainer.py) runs as upstream's "sync" trainer.
TRAINER_MODE = "dapo_ascend"

TAIL = f"trainer.v1.{TRAINER_MODE}.rollout_tail"


def rollout_tail_policy(view: ConfigView) -> Iterator[Finding]:
    """The recipe's rollout long-tail policy (recipe/dapo_ascend/rollout_tail) acts only in the
    ``dapo_ascend`` trainer; with carry-over, part of each trained batch comes from last step's
    weights, which only rollout-correction importance weights account for in the loss."""
    if not view.get_bool(f"{TAIL}.enable"):
        return
    mode = view.get("trainer.v1.trainer_mode", "sync")
    if mode != TRAINER_MODE or not view.uses_v1_trainer:
        yield Finding(
            "rollout_tail_ignored",
            ERROR,
            f"{TAIL}.enable=True but trainer.v1.trainer_mode={mode!r}"
            f"{'' if view.uses_v1_trainer else ' and trainer.use_v1=False'}: only the recipe's 'dapo_ascend' "
            "trainer (V1) reads it, so nothing would be over-provisioned or cut. Set "
            "trainer.v1.trainer_mode=dapo_ascend.",
            (f"{TAIL}.enable", "trainer.v1.trainer_mode"),
        )
        return
    if view.get_bool(f"{TAIL}.carry_over", True) and not view.get("algorithm.rollout_correction.rollout_is"):
        yield Finding(
            "rollout_tail_off_policy_uncorrected",
            WARN,
            f"{TAIL}.carry_over=True trains tokens sampled with the previous step's weights (up to "
            f"{TAIL}.max_staleness steps old) but algorithm.rollout_correction.rollout_is is unset, so the loss "
            "treats them as on-policy. Set algorithm.rollout_correction.rollout_is=token (truncated importance "
            "weights), or carry_over=False to drop aborted responses instead.",
            (f"{TAIL}.carry_over", "algorithm.rollout_correction.rollout_is"),
        )


RULES = (rollout_tail_policy,)


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``): the recipe's rules and its trainer mode."""
    checks.register(*RULES)
    checks.register_sync_trainer_mode(TRAINER_MODE)
