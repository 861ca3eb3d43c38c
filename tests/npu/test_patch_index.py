"""The patch index: every entry complete, and a failing test for each target that changes.

A fingerprint mismatch means the patched upstream/transformers code changed: read the new
code, re-verify the patch (and its tests), then update the fingerprint in
verl/ascend/patch/__init__.py.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from verl.ascend.patch import PATCHES, PATCHES_BY_ID, source_fingerprint

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("patch", PATCHES, ids=[p.id for p in PATCHES])
def test_entry_is_complete(patch):
    for field in ("target", "why", "switched_on", "upstream_fix", "remove_when", "test", "code"):
        assert getattr(patch, field).strip(), f"{patch.id}: empty {field}"
    test_file = patch.test.split("::", 1)[0]
    assert (REPO / test_file).exists() or test_file.startswith("tests/cpu"), f"{patch.id}: {test_file} missing"


@pytest.mark.parametrize("patch", [p for p in PATCHES if p.fingerprints], ids=[p.id for p in PATCHES if p.fingerprints])
def test_fingerprints(patch):
    changed = {
        spec: (expected, source_fingerprint(spec))
        for spec, expected in patch.fingerprints.items()
        if source_fingerprint(spec) != expected
    }
    assert not changed, f"patch {patch.id}: target source changed {changed}; re-verify the patch, then update"


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
    from verl.ascend.vllm_plugin import WORKER_MODULE

    source = (Path(vllm_ascend.__file__).parent / "worker" / "worker.py").read_text()
    assert WORKER_MODULE == "vllm_ascend.worker.worker" and "adapt_patch" in source


def test_index_ids_are_unique():
    assert len(PATCHES_BY_ID) == len(PATCHES)
