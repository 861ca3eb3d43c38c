"""The Ascend platform (upstream name ``huawei``), the emulator switch, and the emulated device."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from verl.ascend import emulator
from verl.ascend.platform import AscendPlatform


@pytest.fixture
def platform():
    return AscendPlatform()


def test_registered_under_upstreams_name():
    from verl.plugin.platform import PlatformRegistry
    from verl.plugin.platform.platform_npu import PlatformNPU

    assert PlatformRegistry.get("huawei") is AscendPlatform
    assert issubclass(AscendPlatform, PlatformNPU)


def test_auto_detection_picks_it(monkeypatch):
    from verl.plugin.platform.platform_manager import _detect_platform_name

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    assert _detect_platform_name() == "huawei"


@pytest.mark.skipif(emulator.real_torch_npu_importable(), reason="needs a host without torch_npu")
def test_without_the_emulator_a_cpu_host_gets_the_cpu_platform(monkeypatch, platform):
    from verl.plugin.platform.platform_manager import _detect_platform_name

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    emulator.uninstall()
    try:
        assert not emulator.requested({})
        assert not platform.is_platform_available(use_smi_check=True)
        assert _detect_platform_name() == "cpu"
        with pytest.raises(RuntimeError, match="VERL_ASCEND_NPU_EMULATOR=1"):
            platform.device_module  # noqa: B018
    finally:
        assert emulator.install()


def test_emulator_never_stands_in_for_a_real_torch_npu():
    if emulator.real_torch_npu_importable():
        assert not emulator.active()
        return
    emulator.uninstall()
    try:
        sys.modules["torch_npu"] = types.ModuleType("torch_npu")  # what an imported real torch_npu looks like
        assert emulator.real_torch_npu_importable()
        assert emulator.install() is False and not emulator.active()
    finally:
        del sys.modules["torch_npu"]
        assert emulator.install()


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("0", False), ("", False)])
def test_emulator_switch_values(value, expected):
    assert emulator.requested({emulator.ENV_FLAG: value}) is expected


def test_emulator_switch_rejects_unknown_values():
    with pytest.raises(ValueError, match="VERL_ASCEND_NPU_EMULATOR='maybe' is not a boolean: expected one of 1, true"):
        emulator.requested({emulator.ENV_FLAG: "maybe"})


def test_platform_identity(platform):
    assert platform.vendor_name == "huawei"
    assert platform.visible_devices_envvar() == "ASCEND_RT_VISIBLE_DEVICES"
    assert platform.ray_resource_name() == "NPU"
    assert platform.ray_resource_options(1) == {"resources": {"NPU": 1}}
    assert platform.ray_noset_envvars() == ["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]
    if platform.emulated:
        assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
        assert platform.is_ipc_supported() is False
    else:
        assert platform.device_name == "npu"


def test_upstream_device_helpers_follow_the_platform():
    from verl.utils import device

    assert device.get_device_name() == AscendPlatform().device_name
    assert device.get_torch_device() is torch.npu
    assert device.get_vendor() == "huawei" and device.get_resource_name() == "NPU"
    assert device.is_npu_available is True


@pytest.mark.skipif(emulator.real_torch_npu_importable(), reason="emulated device only")
def test_uninstall_restores_upstreams_flag():
    from verl.utils import device

    emulator.uninstall()
    try:
        assert device.is_npu_available is False and not hasattr(torch, "npu") and "torch_npu" not in sys.modules
    finally:
        emulator.install()
    assert device.is_npu_available is True


@pytest.mark.skipif(emulator.real_torch_npu_importable(), reason="emulated device only")
class TestEmulatedDevice:
    def test_device_count_follows_ray_visible_devices(self, monkeypatch, platform):
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3,5")
        assert platform.device_count() == 2
        monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
        monkeypatch.setenv("VERL_ASCEND_EMULATOR_DEVICES", "4")
        assert platform.device_count() == 4
        monkeypatch.setenv("VERL_ASCEND_EMULATOR_DEVICES", "many")
        with pytest.raises(ValueError, match="VERL_ASCEND_EMULATOR_DEVICES"):
            platform.device_count()

    def test_set_device_checks_the_index(self, monkeypatch, platform):
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
        platform.set_device(1)
        assert platform.device_module.current_device() == 1
        assert platform.current_device() == "cpu"  # what upstream moves tensors to: the CPU
        with pytest.raises(RuntimeError, match="invalid device index 2"):
            platform.set_device(2)
        platform.set_device(0)

    def test_seeding_is_reproducible(self, platform):
        platform.manual_seed(123)
        a = torch.rand(4)
        platform.manual_seed_all(123)
        assert torch.equal(a, torch.rand(4))

    def test_memory_and_sync_calls_answer(self, platform):
        npu = platform.device_module
        platform.synchronize()
        platform.empty_cache()
        platform.set_allocator_settings("expandable_segments:True")
        assert npu.memory_allocated() == 0 and npu.max_memory_reserved() == 0
        free, total = npu.mem_get_info()
        assert free == total > 0
        assert platform.get_device_capability() == (None, None)
        start, end = npu.Event(enable_timing=True), npu.Event(enable_timing=True)
        start.record()
        end.record()
        assert start.elapsed_time(end) >= 0.0

    def test_standin_module_is_importable_like_the_real_one(self):
        import importlib.util

        import torch_npu
        from torch_npu.npu import mstx

        assert importlib.util.find_spec("torch_npu") is not None
        assert callable(torch_npu.npu_rms_norm) and callable(torch_npu.npu_fusion_attention)
        with mstx.mstx_range("step"):
            pass


def test_rollout_env_vars_keep_upstreams_and_add_the_profile(monkeypatch, platform):
    monkeypatch.setenv("VLLM_ASCEND_TASK_QUEUE_ENABLE", "1")
    monkeypatch.setenv("VERL_ASCEND_ENV_PROFILE", '{"version":1,"train":{},"rollout":{"HCCL_OP_EXPANSION_MODE":"AIV"}}')
    env = platform.rollout_env_vars()
    assert env["NCCL_CUMEM_ENABLE"] == "0" and env["TASK_QUEUE_ENABLE"] == "1"  # upstream PlatformNPU
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV"  # the profile's rollout role
    monkeypatch.delenv("VERL_ASCEND_ENV_PROFILE")
    assert "HCCL_OP_EXPANSION_MODE" not in platform.rollout_env_vars()


def test_plugin_register_is_idempotent():
    from verl.ascend import plugin

    plugin.register()
    plugin.register()
    from verl.plugin.platform import PlatformRegistry

    assert PlatformRegistry.get("huawei") is AscendPlatform
