"""Ray actors that report, from inside worker processes, what the Ascend platform and env profile look like."""

from __future__ import annotations

import os
import types

import ray
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register


class _StubModelConfig:
    def __init__(self, model_type):
        self.hf_config = types.SimpleNamespace(model_type=model_type)

    def get(self, key, default=None):
        return default


def _platform_facts() -> dict:
    import torch
    from verl.plugin.platform import get_platform

    from verl.ascend import emulator

    platform = get_platform()
    return {
        "pid": os.getpid(),
        "platform": type(platform).__name__,
        "vendor": platform.vendor_name,
        "device_name": platform.device_name,
        "resource": platform.ray_resource_name(),
        "emulated": emulator.active(),
        "npu_ids": ray.get_runtime_context().get_accelerator_ids().get("NPU", []),
        "device_count": torch.npu.device_count(),
    }


class ProbeWorker(Worker):
    """A verl training worker that reports its platform, its env, and what the FSDP hook patches."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def probe(self, names):
        return {**_platform_facts(), "env": {n: os.environ.get(n) for n in names}}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def build_model_hook(self, model_type):
        """What upstream's FSDP engine triggers before it builds the model."""
        import verl.workers.engine.fsdp.utils as fsdp_utils

        from verl.ascend.ops import applied_reports

        fsdp_utils.apply_npu_fsdp_patches(_StubModelConfig(model_type))
        report = applied_reports()[-1]
        return {"pid": os.getpid(), "active": report.active, "off": report.switched_off, "summary": report.summary()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def launch_rollout_server(self, names):
        """Create a server actor the way upstream's vLLM replica does, and probe it and a process it spawns."""
        import env_probe
        from verl.plugin.platform import get_platform

        platform = get_platform()
        env_vars = {**{var: "1" for var in platform.ray_noset_envvars()}, **platform.rollout_env_vars()}
        server_cls = ray.remote(env_probe.RolloutServerProbe)
        server = server_cls.options(runtime_env={"env_vars": env_vars}, num_cpus=0).remote()
        try:
            return ray.get(server.probe.remote(names))
        finally:
            ray.kill(server)
