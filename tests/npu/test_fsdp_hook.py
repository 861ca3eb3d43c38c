"""Upstream's FSDP-engine NPU hook is rerouted to verl-ascend's fused ops on the Ascend platform."""

from __future__ import annotations

import types

import pytest

from verl.ascend.ops import applied_reports, revert_fused_ops


class StubModelConfig:
    """The two things the hook reads from verl's HFModelConfig."""

    def __init__(self, model_type, use_liger=False):
        self.hf_config = types.SimpleNamespace(model_type=model_type)
        self.use_liger = use_liger

    def get(self, key, default=None):
        return getattr(self, key, default)


@pytest.fixture
def fsdp_utils():
    import verl.workers.engine.fsdp.utils as module

    yield module
    revert_fused_ops()


def test_hook_is_installed_on_import(fsdp_utils):
    from verl.ascend.patch import fsdp_engine

    assert getattr(fsdp_utils.apply_npu_fsdp_patches, "__verl_ascend_patched__", False)
    fsdp_engine.patch_module(fsdp_utils)  # idempotent: no second wrapper
    assert not getattr(fsdp_utils.apply_npu_fsdp_patches.__wrapped__, "__verl_ascend_patched__", False)


def test_hook_applies_fused_ops_for_the_model_being_built(fsdp_utils):
    before = len(applied_reports())
    fsdp_utils.apply_npu_fsdp_patches(StubModelConfig("llama"))
    reports = applied_reports()[before:]
    assert [r.model_type for r in reports] == ["llama"]
    assert len(reports[0].active) == 3


def test_hook_respects_use_liger(fsdp_utils):
    before = len(applied_reports())
    fsdp_utils.apply_npu_fsdp_patches(StubModelConfig("qwen2", use_liger=True))
    assert len(applied_reports()) == before


def test_other_platforms_get_upstreams_original(fsdp_utils, monkeypatch):
    from verl.plugin.platform import platform_manager

    from verl.ascend.patch import fsdp_engine
    from verl.cpu.platform import PlatformCPU

    calls = []
    monkeypatch.setattr(platform_manager, "_current_platform", PlatformCPU())
    wrapper = fsdp_engine._wrap(lambda cfg: calls.append(cfg))
    before = len(applied_reports())
    config = StubModelConfig("qwen2")
    wrapper(config)
    assert calls == [config] and len(applied_reports()) == before
