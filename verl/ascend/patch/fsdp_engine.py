"""Route upstream's FSDP-engine NPU patch hook through verl-ascend's fused ops.

Upstream's ``FSDPEngine.__init__`` calls
``verl.workers.engine.fsdp.utils.apply_npu_fsdp_patches(model_config)`` (looked up at call
time) before it builds the model. Upstream's version, when ``is_npu_available``, patches
*every* Qwen architecture in ``npu_patch.NPU_PATCHES`` at once, has no Llama and no per-op
switch. On the Ascend platform the replacement installed here instead calls
:func:`verl.ascend.ops.apply_fused_ops` for the model actually being built (per-op
switches, Llama, a log line of what was patched, one warning for uncovered models), and
leaves upstream's per-model patch to architectures verl-ascend does not cover. On any other
platform it calls upstream's original unchanged.

Registered in :mod:`verl.ascend.seams` as ``fsdp_npu_patch_hook``.

Armed by the ``verl.plugins`` entry point in every process, applied when upstream imports
``verl.workers.engine.fsdp.utils``. Upstream fix (none filed yet): per-op switches, Llama and a ``model_type``
argument in ``verl/models/transformers/npu_patch.py``; remove the row then.
"""

from __future__ import annotations

import functools
import logging

TARGET_MODULE = "verl.workers.engine.fsdp.utils"
TARGET_ATTR = "apply_npu_fsdp_patches"

logger = logging.getLogger(__name__)


def model_type_of(model_config) -> str | None:
    """The HF ``model_type`` of verl's ``HFModelConfig`` (or any object with ``hf_config``)."""
    hf_config = getattr(model_config, "hf_config", None)
    return getattr(hf_config, "model_type", None)


def _on_ascend() -> bool:
    from verl.plugin.platform import get_platform

    from verl.ascend.platform import AscendPlatform

    return isinstance(get_platform(), AscendPlatform)


def _wrap(original):
    @functools.wraps(original)
    def apply_npu_fsdp_patches(model_config=None):
        if not _on_ascend():
            return original(model_config)
        if model_config is not None and model_config.get("use_liger", False):
            logger.info("verl.ascend: use_liger=True, fused NPU ops left to liger (as upstream does)")
            return None
        model_type = model_type_of(model_config)
        if model_type is None:
            logger.warning("verl.ascend: no hf_config.model_type on the model config; fused ops not applied")
            return None
        from verl.ascend.ops import apply_fused_ops

        apply_fused_ops(model_type)
        return None

    apply_npu_fsdp_patches.__verl_ascend_patched__ = True
    return apply_npu_fsdp_patches


def patch_module(module) -> None:
    """Replace ``apply_npu_fsdp_patches`` in the imported ``verl.workers.engine.fsdp.utils``."""
    original = getattr(module, TARGET_ATTR)
    if getattr(original, "__verl_ascend_patched__", False):
        return
    setattr(module, TARGET_ATTR, _wrap(original))


def install() -> None:
    """Arm the patch; it is applied when (or if) upstream imports the target module."""
    from verl_ascend.seams.post_import import when_imported

    when_imported(TARGET_MODULE, patch_module)
