"""The CPU's "card" for the memory plan (``verl_ascend.memory``): a documented choice, since a CPU has none.

- size: the host's physical memory divided by the ranks placed on it (``trainer.n_gpus_per_node``),
  because every rank's tensors and its colocated vLLM engine share that one memory; a plan that fits
  this share fits the machine with all ranks at their peak at once (the worst case);
- KV cache: vLLM's CPU build takes it from ``VLLM_CPU_KVCACHE_SPACE`` GiB (vllm/platforms/cpu.py
  ``check_and_update_config`` turns it into ``kv_cache_memory_bytes``; ``cpu_worker.determine_available_memory``
  then uses it as is), which this backend's rollout role sets (``vllm_plugin.ROLLOUT_DEFAULTS``, the
  process environment wins), so ``gpu_memory_utilization`` does not size it here;
- KV block size 128: vllm/platforms/cpu.py sets it when the user sets none;
- collectives over gloo hold no device buffers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

GIB = 1024**3


def host_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_devices(config: Any, environ: Mapping[str, str]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from verl.cpu.vllm_plugin import ROLLOUT_DEFAULTS
    from verl_ascend.memory.devices import DeviceMemory

    ranks = max(1, int(OmegaConf.select(config, "trainer.n_gpus_per_node", default=1) or 1))
    raw = environ.get("VLLM_CPU_KVCACHE_SPACE") or ROLLOUT_DEFAULTS["VLLM_CPU_KVCACHE_SPACE"]
    where = "VLLM_CPU_KVCACHE_SPACE" + (" (launching environment)" if environ.get("VLLM_CPU_KVCACHE_SPACE")
                                        else " (verl/cpu/vllm_plugin.py ROLLOUT_DEFAULTS)")
    try:
        kv = int(raw) * GIB
    except ValueError:
        from verl_ascend.memory.terms import PlanInputError

        raise PlanInputError(f"VLLM_CPU_KVCACHE_SPACE={raw!r}: vLLM's CPU build accepts an integer of GiB") from None
    card = DeviceMemory(
        "CPU host share", host_bytes() // ranks, f"host memory / trainer.n_gpus_per_node={ranks}",
        128, "vllm/platforms/cpu.py check_and_update_config (128 unless set)",
        kv_cache_bytes=kv, kv_cache_source=f"{raw} GiB from {where}", kv_cache_keys=("VLLM_CPU_KVCACHE_SPACE",))
    return {"host": card}
