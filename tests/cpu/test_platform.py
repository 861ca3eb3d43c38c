"""The cpu platform: auto-selected without an accelerator, and a device module upstream can drive."""

from __future__ import annotations

import os
import subprocess
import sys

import torch


def _platform_in_subprocess(env_extra: dict) -> str:
    code = "import verl; from verl.plugin.platform import get_platform; print(type(get_platform()).__name__)"
    env = {**os.environ, **env_extra}
    env.pop("VERL_PLATFORM", None) if "VERL_PLATFORM" not in env_extra else None
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_cpu_platform_is_auto_detected_without_accelerator():
    assert not torch.cuda.is_available()
    assert _platform_in_subprocess({}) == "PlatformCPU"


def test_verl_platform_env_selects_cpu():
    assert _platform_in_subprocess({"VERL_PLATFORM": "cpu"}) == "PlatformCPU"


def test_upstream_device_helpers_answer_for_cpu():
    from verl.cpu.platform import PlatformCPU
    from verl.plugin.platform import set_platform
    from verl.utils import device

    set_platform(PlatformCPU())
    assert device.get_device_name() == "cpu"
    assert device.get_nccl_backend() == "gloo"
    # a string, never 0 (which .to() would read as cuda:0)
    assert device.get_device_id() == "cpu"
    assert torch.zeros(1).to(device.get_device_id()).device.type == "cpu"
    mod = device.get_torch_device()
    free, total = mod.mem_get_info()
    assert 0 < free <= total
    assert mod.memory_allocated() > 0
    assert "CPU" in mod.get_device_name()
    state = mod.get_rng_state()
    a = torch.rand(3)
    mod.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    assert PlatformCPU().ray_resource_options(1) == {"num_gpus": 1}
