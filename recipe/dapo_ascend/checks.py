"""The DAPO recipe's rules of the one validation pipeline, registered with ``verl_ascend.checks``.

Registered through the entry point ``verl_ascend.checks: dapo_ascend = recipe.dapo_ascend.checks:register_checks``
(setup.py), so every ``verl_ascend.checks.validate`` runs them without the neutral package importing the recipe:

- ``config_types`` (gate): every key the recipe reads has the right type and range (``config_schema.py``),
  one finding per key;
- ``trainer_mode_supported`` (gate): the trainer mode is one of upstream's (``verl_ascend/trainer_mode.py``),
  each run by the recipe's trainer (``modes.py``); its internal registry names are not for users;
- ``rollout_tail_policy``: the rollout-tail policy acts in ``sync`` only (its keys' ranges are
  ``config_types``'s, from the declared section ``TailPolicy``).
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend import checks, trainer_mode
from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.pipeline import GATE, keys_named, tag
from verl_ascend.checks.view import ConfigView

from recipe.dapo_ascend import modes

TAIL = "trainer.v1.dapo_ascend.rollout_tail"


def config_types(view: ConfigView) -> Iterator[Finding]:
    """Every key the recipe reads has the right type and range (``config_schema.py``)."""
    from recipe.dapo_ascend import config_schema

    for problem in config_schema.problems(view.config):
        yield Finding("config_types", ERROR, problem, keys_named(problem))


def trainer_mode_supported(view: ConfigView) -> Iterator[Finding]:
    """The trainer mode is one of upstream's; each runs the recipe's hooks (``modes.py``)."""
    mode = trainer_mode.mode_of(view)
    if mode in trainer_mode.MODES:
        return
    upstream = {name: m for m, name in modes.REGISTRY.items()}.get(mode)
    why = (f"{mode!r} is the recipe's internal registry name for upstream's {upstream!r} mode; name upstream's "
           "mode instead" if upstream else f"{mode!r} is not a trainer mode the recipe runs")
    yield Finding("trainer_mode_supported", ERROR, f"{trainer_mode.KEY}={mode}: {why}", (trainer_mode.KEY,),
                  accepted=" | ".join(trainer_mode.MODES))


def rollout_tail_policy(view: ConfigView) -> Iterator[Finding]:
    """The recipe's rollout long-tail policy (recipe/dapo_ascend/rollout_tail): its settings in range
    (a declared section, ``rollout_tail/policy.py::TailPolicy``: ``config_types`` names a value out of
    range), and it acts only in ``sync`` (the recipe's V1 trainer); with carry-over, part of each trained batch
    comes from last step's weights, which only rollout-correction importance weights account for in the loss.

    In the async modes upstream's own partial rollout carries unfinished responses across weight updates
    (``FullyAsyncLLMServerClient``) and its ``ReplayBufferAsync`` samples: the tail's sampler, a synchronous
    one, would replace that buffer, so the policy is refused there rather than ignored."""
    from recipe.dapo_ascend.rollout_tail.policy import TailPolicy
    from verl_ascend.sections import SectionError

    try:
        policy = TailPolicy.from_config(view.config)
    except (SectionError, ValueError):  # refused by config_types, naming the key and what is accepted
        return
    if not policy.enable:
        return
    mode = trainer_mode.mode_of(view)
    if mode != trainer_mode.SYNC or not view.uses_v1_trainer:
        why = (f"{trainer_mode.KEY}={mode!r}: upstream's partial rollout and ReplayBufferAsync handle the "
               "long tail there, and the tail's synchronous sampler would replace that buffer"
               if view.uses_v1_trainer else "trainer.use_v1=False: only the recipe's V1 trainer reads it")
        yield Finding(
            "rollout_tail_ignored",
            ERROR,
            f"{TAIL}.enable=True but {why}. Set {trainer_mode.KEY}=sync with trainer.use_v1=True, or "
            f"{TAIL}.enable=false.",
            (f"{TAIL}.enable", trainer_mode.KEY),
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


tag(config_types, stage=GATE, launch=True)
tag(trainer_mode_supported, stage=GATE, launch=True)
tag(rollout_tail_policy, launch=True)

RULES = (config_types, trainer_mode_supported, rollout_tail_policy)


PRESET_KEYS = ("trainer.v1.separate_async.parameter_sync_step", "actor_rollout_ref.rollout.nnodes")


def register_presets() -> None:
    """The values the recipe's pool presets set, so that a refusal names the preset a value came from
    (``rules_async.preset_origin``): a preset sized for the recipe's 512/32 batch appended to a user's script."""
    from pathlib import Path

    import yaml
    from omegaconf import OmegaConf

    from verl_ascend.checks import rules_async

    for path in sorted((Path(__file__).parent / "config" / "pools").glob("*.yaml")):
        preset = OmegaConf.create(yaml.safe_load(path.read_text()))
        values = {key: OmegaConf.select(preset, key) for key in PRESET_KEYS}
        rules_async.register_preset_values(f"+pools={path.stem} (recipe/dapo_ascend/config/pools/{path.name})",
                                           {k: v for k, v in values.items() if v is not None})


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``): the recipe's rules."""
    checks.register(*RULES)
    register_presets()
