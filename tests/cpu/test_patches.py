"""The CPU backend's hooks into upstream: each registration happens, and each patched target is
still the code the patch was written for (this test fails when upstream changes under it)."""

from __future__ import annotations

import inspect


def test_hf_rollout_is_registered_in_both_upstream_registries():
    import verl  # noqa: F401  (loads the plugins)
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY, get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    assert get_rollout_replica_class("hf").__name__ == "HFReplica"
    assert get_rollout_class("hf", "async").__name__ == "HFServerAdapter"
    assert ("vllm", "async") in _ROLLOUT_REGISTRY  # upstream's own entries untouched


def test_fsdp_engine_is_registered_for_cpu():
    import verl  # noqa: F401
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    assert EngineRegistry._engines["language_model"]["fsdp2"]["cpu"] is FSDPEngineWithLMHead
    assert EngineRegistry._engines["language_model"]["fsdp2"]["cuda"] is FSDPEngineWithLMHead


def test_process_group_backend_patch_targets_the_duplicate_cpu_backend():
    import verl  # noqa: F401
    import verl.utils.distributed as dist

    fn = dist.initialize_global_process_group_ray
    assert getattr(fn, "__verl_cpu_patched__", False)
    original = inspect.getsource(fn.__wrapped__)
    # The patch exists because upstream builds this string; if upstream stops doing so, drop the patch.
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in original
    assert list(inspect.signature(fn.__wrapped__).parameters) == ["timeout_second", "backend"]


def test_patched_backend_is_used_on_cpu(monkeypatch):
    import verl  # noqa: F401
    import verl.utils.distributed as dist
    from verl.cpu.platform import PlatformCPU
    from verl.plugin.platform import set_platform

    set_platform(PlatformCPU())
    seen = {}
    monkeypatch.setattr(dist.torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(dist.torch.distributed, "init_process_group", lambda **kw: seen.update(kw))
    dist.initialize_global_process_group_ray()
    assert seen["backend"] == "cpu:gloo"
    dist.initialize_global_process_group_ray(backend="cpu:gloo,cuda:nccl")
    assert seen["backend"] == "cpu:gloo,cuda:nccl"


def test_when_imported_runs_once_after_import(tmp_path, monkeypatch):
    import sys

    from verl_ascend.seams.post_import import when_imported

    (tmp_path / "late_mod_xyz.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []
    when_imported("late_mod_xyz", lambda m: calls.append(m.VALUE + 1))
    assert calls == []
    import late_mod_xyz  # noqa: F401

    assert calls == [42]
    when_imported("late_mod_xyz", lambda m: calls.append(0))  # already imported: runs now
    assert calls == [42, 0]
    sys.modules.pop("late_mod_xyz", None)
