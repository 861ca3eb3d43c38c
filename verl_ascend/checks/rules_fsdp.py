"""FSDP switch rules: settings that exist in the schema but that the engine in use never reads.

``fsdp_config.forward_prefetch`` (the seed article's "weight prefetch") is passed to FSDP1's
``FullyShardedDataParallel``. Under FSDP2 it acts only if upstream's ``apply_fsdp2`` wires it to
``FSDPModule.set_modules_to_forward_prefetch`` (verl 0.9.1 does; earlier releases did not) and the
installed torch has that method (>= 2.5; older torch skips it silently). Megatron/VeOmni ignore
``fsdp_config`` altogether. Which engine runs is decided by ``actor.strategy``: upstream's
``FSDPActorConfig.__post_init__`` overwrites ``fsdp_config.strategy`` with it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator

from verl_ascend.checks.findings import WARN, Finding
from verl_ascend.checks.view import ACTOR, ConfigView

FSDP_STRATEGIES = ("fsdp", "fsdp2")


@functools.lru_cache(maxsize=1)
def fsdp2_forward_prefetch_supported() -> bool:
    """True when FSDP2 forward prefetch can act with the installed torch and upstream verl."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    if not hasattr(FSDPModule, "set_modules_to_forward_prefetch"):
        return False
    try:
        from verl.utils import fsdp_utils

        source = inspect.getsource(fsdp_utils.apply_fsdp2)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    return "forward_prefetch" in source and "set_modules_to_forward_prefetch" in source


def forward_prefetch(view: ConfigView) -> Iterator[Finding]:
    strategy = view.get(f"{ACTOR}.strategy", "fsdp")
    for role in view.training_roles():
        key = f"{role}.fsdp_config.forward_prefetch"
        if not view.get_bool(key):
            continue
        if strategy not in FSDP_STRATEGIES:
            yield Finding(
                "forward_prefetch_noop",
                WARN,
                f"{key}=True but actor.strategy={strategy!r}: that engine never reads fsdp_config, so no parameter "
                "prefetch happens. Use the engine's own overlap settings, or drop the key.",
                (key, f"{ACTOR}.strategy"),
            )
        elif strategy == "fsdp2" and not fsdp2_forward_prefetch_supported():
            yield Finding(
                "forward_prefetch_noop",
                WARN,
                f"{key}=True under actor.strategy=fsdp2, but this torch/verl pair cannot prefetch under FSDP2 "
                "(no FSDPModule.set_modules_to_forward_prefetch, or upstream's apply_fsdp2 does not use it): the "
                "all-gather of the next layer is not overlapped with compute. Use actor.strategy=fsdp (FSDP1 "
                "passes forward_prefetch to FullyShardedDataParallel) or a torch >= 2.5.",
                (key, f"{ACTOR}.strategy"),
            )


def fsdp_strategy(view: ConfigView) -> Iterator[Finding]:
    actor_strategy = view.get(f"{ACTOR}.strategy", "fsdp")
    engine_strategy = view.get(f"{ACTOR}.fsdp_config.strategy")
    if engine_strategy == "fsdp2" and actor_strategy == "fsdp":
        yield Finding(
            "fsdp_strategy_ignored",
            WARN,
            "actor.fsdp_config.strategy=fsdp2 is overwritten by actor.strategy=fsdp (upstream copies the actor's "
            "strategy into the engine config), so FSDP1 runs. Set actor_rollout_ref.actor.strategy=fsdp2 instead.",
            (f"{ACTOR}.fsdp_config.strategy", f"{ACTOR}.strategy"),
        )


RULES = (forward_prefetch, fsdp_strategy)
