"""Replacement forwards that route HF RMSNorm / SwiGLU MLP / rotary embedding to torch_npu.

Each factory takes the original (transformers') function and returns a replacement that
falls back to it whenever the fused kernel's contract does not hold for the call (an MLP
whose activation is not SiLU, a head dim the rotary kernel refuses, ...), so a patch can
never change a model's maths, only how it is computed.

Every replacement carries ``__verl_ascend_fused__ = <op>`` and ``__wrapped__ = original`` so
that patching is idempotent and can be undone.

``torch_npu`` is looked up at call time (``sys.modules``), never imported at module load:
this module is imported on CPU machines too.
"""

from __future__ import annotations

import sys

import torch

from verl.ascend.ops import counts
from verl.ascend.ops.limits import ROTARY_MAX_HEAD_DIM

SILU_NAMES = ("silu", "swish")


def _torch_npu():
    module = sys.modules.get("torch_npu")
    if module is None:
        import torch_npu as module  # real NPU host: already imported by torch's backend autoload
    return module


def _mark(fn, op: str, original):
    fn.__verl_ascend_fused__ = op
    fn.__wrapped__ = original
    fn.__qualname__ = getattr(original, "__qualname__", fn.__name__)
    fn.__doc__ = f"verl-ascend fused {op} (torch_npu); falls back to the original when the kernel cannot apply."
    return fn


def make_rms_norm_forward(original, eps_attr: str = "variance_epsilon"):
    """``RMSNorm.forward`` via ``torch_npu.npu_rms_norm``.

    The output dtype matches the original's, ``promote(input dtype, weight dtype)``; the
    kernel normalises and scales in float32 and rounds once (the original rounds twice).
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        out_dtype = torch.promote_types(hidden_states.dtype, weight.dtype)
        counts.record("rms_norm")
        y, _ = _torch_npu().npu_rms_norm(
            hidden_states.to(out_dtype), weight.to(out_dtype), epsilon=getattr(self, eps_attr)
        )
        return y

    return _mark(forward, "rms_norm", original)


def _is_silu(mlp) -> bool:
    act = getattr(getattr(mlp, "config", None), "hidden_act", None)
    if act is not None:
        return act in SILU_NAMES
    return isinstance(getattr(mlp, "act_fn", None), torch.nn.SiLU)


def make_swiglu_forward(original):
    """Gated MLP ``down(act(gate(x)) * up(x))`` via ``torch_npu.npu_swiglu`` when act is SiLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _is_silu(self):
            return original(self, x)
        gate_up = torch.cat((self.gate_proj(x), self.up_proj(x)), dim=-1)
        counts.record("swiglu")
        return self.down_proj(_torch_npu().npu_swiglu(gate_up, dim=-1))

    return _mark(forward, "swiglu", original)


def make_apply_rotary_pos_emb(original):
    """HF ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` via ``torch_npu.npu_rotary_mul``.

    ``cos``/``sin`` (B, S, D) are unsqueezed at ``unsqueeze_dim`` as HF does, which gives the
    kernel's B1SD (q/k in BNSD) or BS1D (BSND) operand. Partial rotary, odd or too large
    head dims, and non-4-d inputs go to the original.
    """

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        head_dim = q.shape[-1]
        if (
            q.ndim != 4
            or k.ndim != 4
            or cos.shape[-1] != head_dim
            or k.shape[-1] != head_dim
            or head_dim % 2
            or head_dim >= ROTARY_MAX_HEAD_DIM
        ):
            return original(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
        npu = _torch_npu()
        counts.record("rotary_mul")
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = npu.npu_rotary_mul(q, cos.to(q.dtype), sin.to(q.dtype))
        k_embed = npu.npu_rotary_mul(k, cos.to(k.dtype), sin.to(k.dtype))
        return q_embed, k_embed

    return _mark(apply_rotary_pos_emb, "rotary_mul", original)


FACTORIES = {
    "rms_norm": make_rms_norm_forward,
    "swiglu": make_swiglu_forward,
    "rotary_mul": make_apply_rotary_pos_emb,
}
