"""The one declaration of ``actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.gloo``.

Upstream hands ``engine_kwargs.<backend>`` to the engine's constructor as keyword arguments, in every
trainer worker and rollout server, inside Ray. The gloo engine (``checkpoint_engine.py``) parses them
through this section, and the checks before Ray read the same declaration: the CPU backend's rule
``gloo_engine_kwargs`` (``checks.py``: the launch, ``DRY_RUN=1`` and the doctor, on every device) and
``config_defaults`` (upstream's own entry points on a CPU). Kept apart from the engine so that reading
the declaration imports neither torch nor upstream's engine registry.

Not in the entry-point group ``verl_ascend.sections``: these are an engine's keyword arguments inside
upstream's free-form ``engine_kwargs``, not a key of the recipe's YAML, and users add them with ``+``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_ascend.sections import Section, key, positive_number

KWARGS = "actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.gloo"
ENGINE = "verl/cpu/checkpoint_engine.py::GlooCheckpointEngine"


@dataclass(frozen=True)
class GlooEngineOptions(Section):
    """What the gloo weight-sync engine reads from its ``engine_kwargs``."""

    SECTION = KWARGS

    timeout_s: float = key(
        600.0,
        f"a number of seconds > 0 ({ENGINE}: how long each collective of a weight sync waits for its peers)",
        positive_number,
    )
