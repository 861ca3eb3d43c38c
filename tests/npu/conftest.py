"""tests/npu: the NPU backend's tests, on CPU through the emulator and unchanged on a real NPU.

On a machine without a real ``torch_npu`` each test module runs with the emulator installed
(``VERL_ASCEND_NPU_EMULATOR=1`` in this process and every process it starts: Ray workers,
subprocesses) and the Ascend platform selected; both, and any environment variable a test
set, are undone after the module, so other test folders in the same pytest session see a
normal CPU process (modules first imported under the emulator keep its NPU flag, though:
run tests/npu as its own pytest process). On an Ascend host with a
real ``torch_npu`` the emulator stays off (it only ever stands in for a missing torch_npu)
and the same tests run on the real device: tensors go to ``npu_device``.
"""

from __future__ import annotations

import os

import pytest

import verl  # noqa: F401  (loads the verl.plugins entry points: registers the ``huawei`` platform)
from verl.ascend import emulator

REAL_TORCH_NPU = emulator.real_torch_npu_importable()


def pytest_report_header(config):
    mode = "real torch_npu" if REAL_TORCH_NPU else "CPU emulator (verl.ascend.emulator)"
    return f"tests/npu: NPU backend under {mode}"


@pytest.fixture(scope="module", autouse=True)
def ascend_platform():
    """Emulator (when no real torch_npu) + AscendPlatform as the process platform, for one module."""
    from verl.plugin.platform import platform_manager, set_platform

    from verl.ascend.ops import revert_fused_ops
    from verl.ascend.platform import AscendPlatform

    saved_environ = dict(os.environ)  # apply_to_config & co. set variables: none may leak out of the module
    saved_platform = platform_manager._current_platform
    if not REAL_TORCH_NPU:
        os.environ[emulator.ENV_FLAG] = "1"
        assert emulator.install(), "the NPU emulator did not install"
    platform_manager._current_platform = None
    set_platform(AscendPlatform())
    try:
        yield
    finally:
        revert_fused_ops()
        platform_manager._current_platform = saved_platform
        if not REAL_TORCH_NPU:
            emulator.uninstall()
        os.environ.clear()
        os.environ.update(saved_environ)


@pytest.fixture
def npu_device() -> str:
    """Where NPU tensors live: ``npu`` on an Ascend host, ``cpu`` under the emulator."""
    return "npu" if REAL_TORCH_NPU else "cpu"


@pytest.fixture
def torch_npu():
    import torch_npu as module

    return module


@pytest.fixture
def evaluations(monkeypatch):
    """Counts the env profile's real evaluations (not the answers served from evaluated_once's memo)."""
    from verl.ascend.env import profile as env_profile

    calls = []
    real = env_profile._evaluate
    monkeypatch.setattr(env_profile, "_evaluate", lambda config, environ: calls.append(1) or real(config, environ))
    return calls
