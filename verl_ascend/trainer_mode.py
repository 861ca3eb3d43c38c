"""Upstream's trainer mode, read in one place: the key, its modes, and what runs where in each.

Upstream verl 0.9.1 picks its V1 trainer by one config key (:data:`KEY`): ``sync`` (rollout, then
training, on one pool), ``colocate_async`` (the same pool, rollout sampling ahead) or ``separate_async``
(a rollout pool of its own, weights moved by a checkpoint engine). Every reader here -- the checks, the
dry run, the backends' launch defaults, the trace check, the report, the recipe -- asks this module.

The config always holds the user's mode. A recipe that runs its own trainer class for each mode
(registered with upstream's ``register_trainer`` under names of its own) hands ``run_ppo`` the task
runner from :func:`runner_for`, which resolves the user's mode to the recipe's class inside that
runner's ``run`` only: upstream's log prints the user's mode, and upstream's own launch is untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

KEY = "trainer.v1.trainer_mode"
FIELD = "trainer_mode"  # the name of the mode in the records a run writes (checkpoint marker, resume.jsonl, accept.json)
SYNC, COLOCATE, SEPARATE = "sync", "colocate_async", "separate_async"
DEFAULT = SYNC  # upstream's ppo_trainer.yaml
ASYNC_MODES = (COLOCATE, SEPARATE)
MODES = (SYNC, *ASYNC_MODES)
HYBRID_KEY = "actor_rollout_ref.hybrid_engine"
_ABSENT = object()


def _get(config: Any, dotted: str) -> Any:
    """``dotted`` from a DictConfig, a plain mapping or a ``ConfigView`` (its ``.config``); ``_ABSENT`` if absent.

    Read as the checks read (unresolvable counts as absent); this home imports nothing of theirs."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(config, (DictConfig, Mapping)):
        config = getattr(config, "config", None)  # a ConfigView
    if isinstance(config, DictConfig):
        return OmegaConf.select(config, dotted, default=_ABSENT, throw_on_resolution_failure=False)
    for part in dotted.split("."):
        config = config.get(part, _ABSENT) if isinstance(config, Mapping) else _ABSENT
    return config


def mode_of(config: Any) -> str:
    """The mode a config asks for (:data:`DEFAULT` when the key is absent), as written: a value upstream does
    not know (``null`` included, which upstream's lookup refuses) stays, for the checks to name."""
    mode = _get(config, KEY)
    return DEFAULT if mode is _ABSENT else str(mode)


@dataclass(frozen=True)
class Placement:
    """What runs where in a mode, as upstream's V1 trainers place it.

    ``trainer_rollout``: the trainer pool also hosts rollout replicas (upstream's hybrid engine in
    effect: every mode but ``separate_async`` with ``actor_rollout_ref.hybrid_engine=false``, which
    only that trainer reads). ``rollout_pool``: a standalone rollout pool (``separate_async`` only).
    """

    mode: str
    trainer_rollout: bool
    rollout_pool: bool


def placement(config: Any) -> Placement:
    from verl_ascend.envs import parse_bool

    mode, hybrid = mode_of(config), _get(config, HYBRID_KEY)
    try:  # absent or null: upstream's default (on); text: as the checks parse it, unreadable = off
        hybrid = True if hybrid in (_ABSENT, None) else parse_bool(HYBRID_KEY, hybrid)
    except ValueError:
        hybrid = False
    return Placement(mode, trainer_rollout=hybrid or mode != SEPARATE, rollout_pool=mode == SEPARATE)


# ------------------------------------------------------------------ the recipe's trainer for the user's mode
@contextlib.contextmanager
def recipe_trainers(registry: Mapping[str, str]) -> Iterator[None]:
    """Within the block, upstream's trainer registry answers each mode in ``registry`` (upstream's mode ->
    the name a recipe registered its class under) with the recipe's class; outside it, upstream's own.

    Upstream's ``TaskRunnerV1.run`` looks its trainer up by the config's mode
    (``get_trainer_cls`` on ``TRAINER_REGISTRY``) and then prints the config. Binding the registry
    for the length of ``run``, in the runner's own process, keeps the user's mode in the config (and
    so in that print, and in every branch upstream's trainer takes on the mode's name) without any
    rewrite of the config. Contact: seam row ``trainer_mode_registry_binding``; it goes once upstream's task
    runner takes the trainer class from its caller (no upstream change filed yet).
    """
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, get_trainer_cls

    unknown = sorted(set(registry) - set(MODES))
    if unknown:
        raise ValueError(f"{KEY}: {unknown} are not upstream's modes ({', '.join(MODES)})")
    ours = {mode: get_trainer_cls(name) for mode, name in registry.items()}  # the recipe registered them
    saved = {mode: get_trainer_cls(mode) for mode in ours}  # upstream registers each of its modes on import
    TRAINER_REGISTRY.update(ours)
    try:
        yield
    finally:
        TRAINER_REGISTRY.update(saved)


def runner_for(runner: Any, registry: Mapping[str, str]) -> Any:
    """Upstream's Ray task-runner class ``runner`` (e.g. ``TaskRunnerV1``) whose ``run`` trains the recipe's
    class for the user's mode (:func:`recipe_trainers`); the actor keeps upstream's name in Ray's logs."""
    import ray

    base = runner.__ray_actor_class__
    table = dict(registry)

    def run(self, config):
        with recipe_trainers(table):
            return base.run(self, config)

    bound = type(base.__name__, (base,), {"run": run, "__doc__": base.__doc__})
    return ray.remote(bound)
