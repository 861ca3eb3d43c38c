"""The Ascend NPU platform, registered under upstream's name ``huawei``.

Subclasses upstream's ``PlatformNPU`` and re-registers the name, so every lookup that
resolves ``huawei`` -- auto-detection (torch_npu importable), ``VERL_PLATFORM=huawei``, which
the env profile sets for ``trainer.device=npu`` -- gets this class, in the driver and in
every Ray worker (the ``verl.plugins`` entry point runs at each ``import verl``).

What it adds to upstream's platform:
- the launch hooks of ``verl_ascend.device.DeviceHooks`` for ``trainer.device=npu``: the env profile
  delivered into the job's config after the checks, and what the dry run prints for the NPU;
- ``rollout_env_vars()``: upstream's variables plus the rollout role of the resolved env
  profile (``VERL_ASCEND_ENV_PROFILE``), which upstream passes into the runtime_env of every
  rollout server actor, hence into every vLLM process it spawns;
- (no ``apply_model_patches`` override: verl 0.9.1 never calls that seam; the fused-op patches
  arrive through the FSDP engine's ``apply_npu_fsdp_patches`` hook, :mod:`verl.ascend.patch.fsdp_engine`);
- under the CPU emulator (:mod:`verl.ascend.emulator`): tensors stay on the CPU
  (``device_name == "cpu"``, collectives over ``gloo``) while vendor, Ray resource (``NPU``),
  visible-devices variable and env handling stay the NPU's.
"""

from __future__ import annotations

import logging
from types import ModuleType

import torch
from verl.plugin.platform import PlatformRegistry
from verl.plugin.platform.platform_npu import PlatformNPU

from verl.ascend import emulator
from verl_ascend.device import DeviceHooks

logger = logging.getLogger(__name__)

PLATFORM_NAME = "huawei"


def _missing_torch_npu() -> RuntimeError:
    return RuntimeError(
        "The Ascend platform (VERL_PLATFORM=huawei / trainer.device=npu) is selected but torch_npu is not "
        "importable in this process. Install the NPU stack (requirements/npu.txt) on this host, or set "
        "VERL_ASCEND_NPU_EMULATOR=1 to emulate an NPU on the CPU (tests only)."
    )


@PlatformRegistry.register(platform=PLATFORM_NAME)
class AscendPlatform(PlatformNPU, DeviceHooks):
    """verl's ``huawei`` platform with verl-ascend's env profile, fused ops and CPU emulator."""

    config_device = "npu"  # the trainer.device this platform prepares at launch (verl_ascend.device)

    def deliver_config(self, config) -> None:
        """The resolved env profile into every Ray worker and rollout server (``env.profile.apply_to_config``)."""
        from verl.ascend.env.profile import apply_to_config

        apply_to_config(config)

    def env_profile(self, config, environ):
        """The env profile of this config (its stack and vLLM additional_config), for the effective settings."""
        from verl.ascend.env.profile import evaluate_env_profile

        return evaluate_env_profile(config, environ)[0]

    def dry_run_lines(self, config, environ) -> list[str]:
        """The env profile per role with each value's reason, and the pools of an async job (``env.dry_run``)."""
        from verl.ascend.env.dry_run import lines

        return lines(config, environ)

    def memory_devices(self, config, environ):
        """The Ascend cards the memory plan holds a job against (``memory.py``: 910B, A3 die)."""
        from verl.ascend.memory import memory_devices

        return memory_devices(config, environ)

    def cluster_probe(self, job) -> dict:
        """``verl-ascend cluster`` on each node: stack gate and CANN, npu-smi and visible devices, hccn_tool links."""
        from verl.ascend.nodes.probe import probe

        return probe(job)

    def cluster_collective(self) -> tuple[str, str]:
        """HCCL on the cards (gloo on the CPU under the emulator), as the job's collectives."""
        return ("gloo", "cpu") if self.emulated else ("hccl", "npu")

    def cluster_resource(self) -> str:
        return self.ray_resource_name()

    def evaluated_once(self):
        """The env profile evaluated once per config state: the checks, then ``deliver_config`` (a launch),
        or three sections (a dry run)."""
        from verl.ascend.env.profile import evaluated_once

        return evaluated_once()

    @property
    def emulated(self) -> bool:
        return emulator.active()

    @property
    def device_name(self) -> str:
        return "cpu" if self.emulated else "npu"

    @property
    def device_module(self) -> ModuleType:
        if not hasattr(torch, "npu"):
            raise _missing_torch_npu()
        return torch.npu

    def is_available(self) -> bool:
        if self.emulated:
            return True
        return hasattr(torch, "npu") and torch.npu.is_available()

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        if self.emulated:
            return True
        return super().is_platform_available(use_smi_check=use_smi_check)

    def current_device(self):
        # upstream uses it as a torch device (``.to(get_device_id())``): on the emulator that is the CPU
        return "cpu" if self.emulated else self.device_module.current_device()

    def communication_backend_name(self) -> str:
        return "gloo" if self.emulated else super().communication_backend_name()

    def is_ipc_supported(self) -> bool:
        return False if self.emulated else super().is_ipc_supported()

    def rollout_env_vars(self) -> dict[str, str]:
        from verl.ascend.env.wire import rollout_env_from_environ

        env = super().rollout_env_vars()
        env.update(rollout_env_from_environ())
        return env

