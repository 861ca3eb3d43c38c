"""The card a plan is held against: one declaration per device, from the backend that owns the device.

Why the backend declares it: how much memory torch sees on a 910B (about 61.3 GiB of its 64 GB), the
KV block size its vLLM platform picks, the collective library's buffer per communicator and how a CPU
engine sizes its KV cache are facts of the device, so they live in ``verl/ascend`` and ``verl/cpu`` and
reach this toolkit through ``DeviceHooks.memory_devices`` on the platform class of ``trainer.device``.
The user's ``memory.device`` picks one of the declared cards and ``memory.device_gib`` overrides its size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from verl_ascend.memory.terms import GIB, PlanInputError


@dataclass(frozen=True)
class DeviceMemory:
    """One card as the plan sees it (every figure per card, each with where it comes from)."""

    name: str  # e.g. "Ascend 910B"
    bytes: int  # memory torch can allocate on the card
    source: str
    kv_block_size: int  # the rollout engine's default KV block size on this device (tokens)
    kv_block_source: str
    comm_buffer_bytes: int = 0  # device memory each collective communicator holds (HCCL: 2 x HCCL_BUFFSIZE)
    comm_source: str = "no device buffers"
    # The rollout engine's KV cache when the device fixes it (vLLM CPU: VLLM_CPU_KVCACHE_SPACE); None:
    # vLLM's accelerator rule, gpu_memory_utilization x card - weights - profiling peak - non-torch.
    kv_cache_bytes: int | None = None
    kv_cache_source: str = ""
    kv_cache_keys: tuple[str, ...] = ()


def declared(config: Any, environ: Mapping[str, str]) -> dict[str, DeviceMemory]:
    """The cards the backend of ``trainer.device`` declares, first the default one."""
    from omegaconf import OmegaConf

    from verl_ascend.device import device_hooks

    device = str(OmegaConf.select(config, "trainer.device", default=None) or "cpu")
    return dict(device_hooks(device).memory_devices(config, environ) or {})


def device_memory(config: Any, environ: Mapping[str, str] | None = None) -> DeviceMemory:
    """The card of this config: the declared one ``memory.device`` names, sized by ``memory.device_gib`` if set.

    Raises PlanInputError naming ``memory.device`` / ``memory.device_gib`` / ``trainer.device`` and what
    would be accepted."""
    import os

    from verl_ascend.memory.options import MemoryOptions
    from verl_ascend.sections import SectionError

    environ = dict(os.environ if environ is None else environ)
    try:
        options = MemoryOptions.from_config(config)
    except (SectionError, ValueError) as exc:
        raise PlanInputError(str(exc)) from None
    cards = declared(config, environ)
    if options.device == "auto":
        card = next(iter(cards.values()), None)
    else:
        card = cards.get(options.device)
        if card is None:
            raise PlanInputError(f"memory.device={options.device!r}: not a card the backend of trainer.device "
                                 f"declares; accepted: auto, {', '.join(cards) or '(none: set memory.device_gib)'}")
    if options.device_gib is not None:
        size = int(float(options.device_gib) * GIB)
        card = replace(card, bytes=size, source=f"memory.device_gib={options.device_gib}") if card else DeviceMemory(
            "user-declared card", size, f"memory.device_gib={options.device_gib}", 16, "vLLM's default block size")
    if card is None:
        raise PlanInputError("trainer.device: no backend of verl-ascend declares this device's memory; set "
                             "memory.device_gib to the GiB torch can allocate on one card")
    return card
