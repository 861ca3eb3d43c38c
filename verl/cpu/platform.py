"""The ``cpu`` platform: verl's device abstraction answered for a machine with no accelerator.

Registered in upstream's ``PlatformRegistry`` by the ``verl.plugins`` entry point. It is
registered after upstream's built-ins, and auto-detection probes platforms in registration
order, so it is chosen only when no CUDA/NPU/ROCm platform reports itself available
(or explicitly with ``VERL_PLATFORM=cpu``).

Ray resources: upstream's resource pools always ask for one accelerator per training rank
(``RayResourcePool(use_gpu=True)``) and check the cluster's ``GPU``/``NPU`` totals. On a CPU
machine we therefore declare *logical* ``GPU`` slots, one per training rank, when Ray starts
(``ray_init.num_gpus`` in the CPU recipe config, ``ray start --num-gpus`` for a multi-node
cluster). A slot is only a scheduling token: all tensors stay on the CPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Any, Optional

import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry

from verl_ascend.device import DeviceHooks


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase, DeviceHooks):
    """verl platform for CPU-only machines (development, CI, laptops)."""

    config_device = "cpu"  # the trainer.device this platform prepares at launch (verl_ascend.device)

    def prepare_config(self, config) -> list[str]:
        """What a CPU run needs for its trainer mode, unless the user set it: the gloo weight-sync engine
        and a rollout pool in ``separate_async``, sdpa, FSDP2, the Ray slots of both pools
        (``config_defaults.py``, each change logged); a setting that cannot work refuses the start.
        Upstream's ``main_ppo`` gets the same through this backend's ``auto_set_device`` hook; the
        checks then judge what will run."""
        from verl.cpu import config_defaults
        from verl_ascend.checks.preflight import PreflightError

        try:
            return config_defaults.apply(config)
        except config_defaults.CPUConfigError as exc:
            raise PreflightError(str(exc)) from None

    def memory_devices(self, config, environ):
        """The CPU's card for the memory plan (``memory.py``): the host's memory shared by its ranks."""
        from verl.cpu.memory import memory_devices

        return memory_devices(config, environ)

    def cluster_probe(self, job) -> dict:
        """``verl-ascend cluster``: a CPU node has no cards or device links to probe; the cells say so."""
        from verl_ascend.cluster import cells

        why = ("trainer.device=cpu: no accelerator; with trainer.device=npu the Ascend backend reads npu-smi, "
               "ASCEND_RT_VISIBLE_DEVICES and hccn_tool here")
        return {"cells": [cells.skip("devices", why), cells.skip("links", why)], "same": {}}

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        from verl.cpu import device_module

        return device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Probed last (registered last): reaching here means no accelerator platform answered.
        return True

    def current_device(self):
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for the logical GPU slots; harmless for a CPU build of torch.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        with torch.profiler.record_function(msg):
            yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def rollout_env_vars(self) -> dict[str, str]:
        # vLLM's CPU build (rollout.name=vllm): its engine settings, checked inside vLLM's
        # processes by verl.cpu.vllm_plugin.
        from verl.cpu.vllm_plugin import rollout_env

        return {**super().rollout_env_vars(), **rollout_env()}

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
