"""The vllm.general_plugins hook puts vllm-ascend's worker patches before any vLLM model module.

Stand-in vllm / vllm_ascend packages (tests/npu/standins.py, modelled on vllm-ascend
0.10.1rc1) record the import order. The in-process tests drive the hook directly; the
subprocess test goes through the installed entry point in a fresh process, as every process
vLLM spawns does (each one loads the general plugins itself).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys

import pytest
import standins

from verl.ascend import vllm_plugin
from verl.ascend.env_profile import PROFILE_ENV


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """Stand-ins importable in this process; everything they add is removed afterwards."""

    def make(version="0.10.1rc1", device="npu"):
        root = standins.write(tmp_path / f"site-{version}", version)
        monkeypatch.syspath_prepend(str(root))
        monkeypatch.setenv("STANDIN_VLLM_DEVICE", device)
        monkeypatch.setenv("STANDIN_IMPORT_LOG", str(tmp_path / "imports.log"))
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
        monkeypatch.delenv(vllm_plugin.SWITCH_ENV, raising=False)
        importlib.invalidate_caches()
        return tmp_path / "imports.log"

    yield make
    vllm_plugin.uninstall_guard()
    for name in list(sys.modules):
        if name.split(".")[0] in standins.MODULE_PREFIXES:
            del sys.modules[name]
    importlib.invalidate_caches()


def names(log):
    return [name for _pid, name in standins.read_log(log)]


def worker_with_early_model_import(monkeypatch):
    """The failing sequence: plugins load, then verl's extension imports a model, then adapt_patch()."""
    monkeypatch.setenv("STANDIN_WORKER_EXTENSION", "standin_verl_extension")
    import vllm.worker

    vllm.worker.init_worker()
    return vllm.worker.load_model()


def test_without_the_hook_mc2_is_silently_lost(fake_vllm, monkeypatch):
    """Control: the stand-ins reproduce the bug when the hook is switched off."""
    log = fake_vllm()
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE", "1")
    monkeypatch.setenv(vllm_plugin.SWITCH_ENV, "0")
    assert worker_with_early_model_import(monkeypatch) == "plain"
    order = names(log)
    assert order.index("vllm.model_executor.models.qwen2") < order.index("vllm_ascend.patch.worker")


def test_hook_puts_worker_patches_before_the_first_model_module(fake_vllm, monkeypatch):
    log = fake_vllm()
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE", "1")
    assert worker_with_early_model_import(monkeypatch) == "mc2"
    order = names(log)
    assert order.index("vllm_ascend.patch.worker") < order.index("vllm.model_executor.models.qwen2")
    assert order.index("vllm.model_executor.models.registry") < order.index(
        "vllm_ascend.patch.worker"
    )  # helpers are not models
    assert vllm_plugin._guard not in sys.meta_path  # one-shot


def test_hook_fills_in_mc2_switch_from_the_profile(fake_vllm, monkeypatch, caplog):
    """The profile said mc2 but the variable did not reach this process: filled in before the patch import."""
    fake_vllm()
    monkeypatch.delenv("VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE", raising=False)
    profile = {
        "version": 1,
        "train": {},
        "rollout": {"VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE": "1", "TASK_QUEUE_ENABLE": "1"},
    }
    monkeypatch.setenv(PROFILE_ENV, json.dumps(profile))
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "1")
    with caplog.at_level(logging.WARNING, logger="verl.ascend.vllm_plugin"):
        assert worker_with_early_model_import(monkeypatch) == "mc2"
    assert os.environ["VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE"] == "1"
    assert any("missing VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("version", ["0.12.0rc1", "0.13.0", "0.9.1"])
def test_inactive_on_versions_that_do_not_need_it(fake_vllm, monkeypatch, version):
    log = fake_vllm(version=version)
    monkeypatch.setenv("VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE", "1")
    assert not vllm_plugin.decide().needed
    worker_with_early_model_import(monkeypatch)
    order = names(log)
    assert order.index("vllm.model_executor.models.qwen2") < order.index("vllm_ascend.patch.worker")


def test_inactive_on_other_platforms(fake_vllm, monkeypatch):
    log = fake_vllm(device="cuda")
    decision = vllm_plugin.decide()
    assert not decision.needed and "not NPU" in decision.reason
    vllm_plugin.register()
    assert vllm_plugin._guard not in sys.meta_path
    assert "vllm_ascend.patch.worker" not in names(log)


def test_inactive_without_vllm_ascend(monkeypatch):
    decision = vllm_plugin.decide()
    assert not decision.needed and "not installed" in decision.reason


@pytest.mark.parametrize(
    "version,needed",
    [
        ("0.10.0rc1", True),
        ("0.10.1rc1", True),
        ("0.11.0", True),
        ("0.10.2rc1", True),
        ("0.12.0rc1", False),
        ("0.9.2rc1", False),
        ("weird", True),
        (None, True),
    ],
)
def test_version_gate(version, needed):
    assert vllm_plugin.version_needs_hook(version) is needed


def test_model_imported_before_the_plugin_is_reported(fake_vllm, monkeypatch, caplog):
    log = fake_vllm()
    import vllm.model_executor.models.qwen2  # noqa: F401

    with caplog.at_level(logging.WARNING, logger="verl.ascend.vllm_plugin"):
        vllm_plugin.register()
    assert any("vllm.model_executor.models.qwen2" in r.getMessage() for r in caplog.records)
    assert "vllm_ascend.patch.worker" in names(log)


def test_entry_point_runs_in_a_fresh_vllm_process(tmp_path):
    """A fresh process and real entry-point discovery, as in each process vLLM spawns."""
    root = standins.write(tmp_path / "site")
    log = tmp_path / "imports.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "STANDIN_IMPORT_LOG": str(log),
        "STANDIN_WORKER_EXTENSION": "standin_verl_extension",
        "STANDIN_VLLM_DEVICE": "npu",
        "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE": "1",
    }
    env.pop(vllm_plugin.SWITCH_ENV, None)
    code = "import vllm.worker; vllm.worker.run_worker()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    order = names(log)
    assert "plugin-loaded:verl_ascend_import_order" in order
    assert order.index("vllm_ascend.patch.worker") < order.index("vllm.model_executor.models.qwen2")
    assert "model-linear:mc2" in order
