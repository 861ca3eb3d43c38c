"""Which transformers modules get which fused op: one row per covered architecture.

``model_type`` is the HF config's ``model_type`` (Qwen2 and Qwen2.5 both use ``qwen2``).
Each op names the attribute that is replaced: a method on a class (``Class.forward``) or a
module-level function that the attention forward looks up at call time
(``apply_rotary_pos_emb``).

Adding an architecture = adding a row here, plus a tiny-model parity test in
``tests/npu/test_fused_models.py`` and a fingerprint in ``tests/npu/test_patch_index.py``.

Seams ``transformers_qwen2_fused_ops`` and ``transformers_llama_fused_ops`` (one per row below): fused
torch_npu kernels for RMSNorm, SwiGLU and rotary embedding (+8% end to end in the source article; same maths,
one rounding instead of several), applied on the Ascend platform when a worker builds that model, per op
(``ascend.fused_ops.*`` / ``VERL_ASCEND_FUSED_*``). Upstream verl's npu_patch has no Llama at all.
transformers' hub-kernel hooks (``use_kernel_forward_from_hub``) have no NPU kernels in 5.10; once
transformers dispatches these layers to torch_npu kernels itself, both rows go.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpTarget:
    op: str  # "rms_norm" | "swiglu" | "rotary_mul"
    owner: str | None  # class name inside the module, or None for a module-level function
    attr: str  # attribute replaced on the owner (or on the module)
    kwargs: tuple[tuple[str, str], ...] = ()  # extra factory arguments

    def describe(self, module: str) -> str:
        return f"{module}.{self.owner}.{self.attr}" if self.owner else f"{module}.{self.attr}"


@dataclass(frozen=True)
class ArchTarget:
    model_type: str
    module: str
    ops: tuple[OpTarget, ...]


def _arch(model_type: str, module: str, prefix: str) -> ArchTarget:
    return ArchTarget(
        model_type=model_type,
        module=module,
        ops=(
            OpTarget("rms_norm", f"{prefix}RMSNorm", "forward", (("eps_attr", "variance_epsilon"),)),
            OpTarget("swiglu", f"{prefix}MLP", "forward"),
            OpTarget("rotary_mul", None, "apply_rotary_pos_emb"),
        ),
    )


ARCH_TARGETS: dict[str, ArchTarget] = {
    "qwen2": _arch("qwen2", "transformers.models.qwen2.modeling_qwen2", "Qwen2"),
    "llama": _arch("llama", "transformers.models.llama.modeling_llama", "Llama"),
}
