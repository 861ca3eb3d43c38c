"""Checks of the Ascend backend's patch targets that run under the NPU emulator.

The index itself (every row complete, every fingerprint, no contact left out) is tested in
tests/verl_ascend/seams/test_index.py, which needs no emulator; the backend's rows live in verl/ascend/seams.py.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest


def test_fsdp_engine_calls_the_hook_by_module_lookup():
    """The reroute works only while FSDPEngine.__init__ imports the hook at call time."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    source = inspect.getsource(FSDPEngine.__init__)
    assert "from .utils import apply_npu_fsdp_patches" in source
    assert "apply_npu_fsdp_patches(self.model_config)" in source


def test_emulator_flag_target_unchanged():
    """verl/__init__ computes is_npu_available before loading plugins (why the flag is patched)."""
    import verl

    source = Path(verl.__file__).read_text()
    flag = source.index("from .utils.device import is_npu_available")
    plugins = source.index('entry_points(group="verl.plugins")')
    assert flag < plugins
    assert source.count("if is_npu_available:") >= 1


def test_vllm_ascend_imports_worker_patches_in_its_worker():
    """On a host with vllm-ascend: NPUWorker imports its worker patches itself (vllm_plugin only checks it)."""
    vllm_ascend = pytest.importorskip("vllm_ascend")
    from verl.ascend.env.vllm_plugin import WORKER_MODULE

    source = (Path(vllm_ascend.__file__).parent / "worker" / "worker.py").read_text()
    assert WORKER_MODULE == "vllm_ascend.worker.worker" and "adapt_patch" in source


def test_emulator_is_installed_through_the_seam_index():
    """The Ascend plugin ran the emulator's row (it acts only when VERL_ASCEND_NPU_EMULATOR=1 at import)."""
    from verl_ascend.seams import index

    from verl.ascend import emulator

    assert "verl.ascend.emulator:install_if_requested" in index._installed
    assert emulator.active() or emulator.real_torch_npu_importable()
