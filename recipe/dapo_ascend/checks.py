"""The DAPO recipe's rules of the one validation pipeline, registered with ``verl_ascend.checks``.

Registered through the entry point ``verl_ascend.checks: dapo_ascend = recipe.dapo_ascend.checks:register_checks``
(setup.py), so every ``verl_ascend.checks.validate`` runs them without the neutral package importing the recipe:

- ``config_types`` (gate): every key the recipe reads has the right type and range (``config_schema.py``),
  one finding per key;
- ``rollout_tail_policy``: the rollout-tail policy is read by the trainer that runs (its keys' ranges are
  ``config_types``'s, from the declared section ``TailPolicy``);
- ``destination_unusable`` (inputs): run and checkpoint folders writable with room for a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend import checks
from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.pipeline import GATE, INPUTS, from_check, keys_named, tag
from verl_ascend.checks.view import ConfigView
from verl_ascend.run.run_guard import StartRefused

# The recipe's trainer (recipe/dapo_ascend/trainer.py) runs as upstream's "sync" trainer.
TRAINER_MODE = "dapo_ascend"

TAIL = f"trainer.v1.{TRAINER_MODE}.rollout_tail"


def config_types(view: ConfigView) -> Iterator[Finding]:
    """Every key the recipe reads has the right type and range (``config_schema.py``)."""
    from recipe.dapo_ascend import config_schema

    for problem in config_schema.problems(view.config):
        yield Finding("config_types", ERROR, problem, keys_named(problem))


def rollout_tail_policy(view: ConfigView) -> Iterator[Finding]:
    """The recipe's rollout long-tail policy (recipe/dapo_ascend/rollout_tail): its settings in range
    (a declared section, ``rollout_tail/policy.py::TailPolicy``: ``config_types`` names a value out of
    range), and it acts only in the ``dapo_ascend`` trainer; with carry-over, part of each trained batch
    comes from last step's weights, which only rollout-correction importance weights account for in the loss."""
    from recipe.dapo_ascend.rollout_tail.policy import TailPolicy
    from verl_ascend.sections import SectionError

    try:
        policy = TailPolicy.from_config(view.config)
    except (SectionError, ValueError):  # refused by config_types, naming the key and what is accepted
        return
    if not policy.enable:
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
    if policy.carry_over and not view.get("algorithm.rollout_correction.rollout_is"):
        yield Finding(
            "rollout_tail_off_policy_uncorrected",
            WARN,
            f"{TAIL}.carry_over=True trains tokens sampled with the previous step's weights (up to "
            f"{TAIL}.max_staleness={policy.max_staleness} steps old) but algorithm.rollout_correction.rollout_is "
            "is unset, so the loss treats them as on-policy. Set algorithm.rollout_correction.rollout_is=token "
            "(truncated importance weights), or carry_over=False to drop aborted responses instead.",
            (f"{TAIL}.carry_over", "algorithm.rollout_correction.rollout_is"),
        )


def _check_destination(config) -> None:
    from recipe.dapo_ascend.preflight import check_destination

    check_destination(config)


tag(config_types, stage=GATE, launch=True)
tag(rollout_tail_policy, launch=True)
_check_destination.__doc__ = "Checkpoint and run folders writable with room for a checkpoint (``run_guard.py``)."
destination_unusable = from_check(
    "destination_unusable", _check_destination, (StartRefused,), stage=INPUTS, needs=("model_unusable",)
)  # its checkpoint-size estimate reads the model folder

RULES = (config_types, rollout_tail_policy, destination_unusable)


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``): the recipe's rules and its trainer mode."""
    checks.register(*RULES)
    checks.register_sync_trainer_mode(TRAINER_MODE)
