"""Check 2: each fused op on the device against its CPU reference, at the documented tolerances.

The CPU reference is the op's documented numerics, :mod:`verl.ascend.emulator.fused_ops`, run on
the CPU in float32 on the same inputs (rounded to the dtype under test); the device runs ``torch_npu.<op>`` in each dtype. Measured
per op and dtype: max absolute and relative error and ``margin`` = max(err / bound) with bound =
rtol * |ref| + atol (:data:`verl.ascend.ops.limits.OP_TOLERANCES`); margin <= 1 passes.

Under the emulator ``torch_npu`` *is* the reference code, so the check measures the emulator's
rounding to each dtype against its float32 result; the device's kernels are device-only.
"""

from __future__ import annotations

import math

import torch

from verl.ascend.accept.record import Check
from verl.ascend.emulator import fused_ops
from verl.ascend.ops.limits import OP_TOLERANCES

HALF = ("bfloat16", "float16")
DTYPES = {"npu_rms_norm": ("float32", *HALF), "npu_swiglu": ("float32", *HALF),
          "npu_rotary_mul": ("float32", *HALF), "npu_fusion_attention": HALF}


def _rand(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


def _rope(seq: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = _rand(1, 1, seq, dim // 2, seed=4, scale=3.0)
    return torch.cat((theta.cos(), theta.cos()), -1), torch.cat((theta.sin(), theta.sin()), -1)


def cases() -> dict[str, tuple[tuple, dict]]:
    """op -> (float32 CPU tensors, keyword arguments): odd shapes, the layouts the patch uses."""
    cos, sin = _rope(5, 8)
    return {
        "npu_rms_norm": ((_rand(3, 5, 33, seed=1), _rand(33, seed=2) + 1.0), {"epsilon": 1e-6}),
        "npu_swiglu": ((_rand(3, 5, 14, seed=3, scale=2.0),), {"dim": -1}),
        "npu_rotary_mul": ((_rand(2, 3, 5, 8, seed=5), cos, sin), {}),
        "npu_fusion_attention": ((_rand(1, 2, 6, 8, seed=6), _rand(1, 2, 6, 8, seed=7), _rand(1, 2, 6, 8, seed=8)),
                                 {"head_num": 2, "input_layout": "BNSD", "scale": 1 / math.sqrt(8)}),
    }


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def measure(torch_npu, device: str, op: str, dtype_name: str) -> dict:
    """Errors of ``torch_npu.<op>`` on ``device`` in ``dtype_name`` against the float32 CPU reference."""
    args, kwargs = cases()[op]
    dtype = getattr(torch, dtype_name)
    args = [a.to(dtype) for a in args]  # both sides see the same (rounded) inputs
    reference = _first(fused_ops.FUSED_OPS[op](*(a.float() for a in args), **kwargs)).double()
    actual = _first(getattr(torch_npu, op)(*(a.to(device) for a in args), **kwargs))
    if actual.dtype != dtype or tuple(actual.shape) != tuple(reference.shape):
        raise ValueError(f"returned {actual.dtype} {tuple(actual.shape)}, expected {dtype} {tuple(reference.shape)}")
    rtol, atol = OP_TOLERANCES[op][dtype_name]
    err = (actual.detach().cpu().double() - reference).abs()
    bound = rtol * reference.abs() + atol
    return {"max_abs_err": float(err.max()), "max_rel_err": float((err / reference.abs().clamp_min(atol)).max()),
            "margin": float((err / bound).max()), "rtol": rtol, "atol": atol}


def run(torch_npu, device: str, emulated: bool) -> Check:
    check = Check("fused_ops", "fused ops on the device against the CPU reference (documented tolerances)")
    check.value["device"] = "emulator (CPU)" if emulated else device
    for op, dtypes in DTYPES.items():
        for dtype_name in dtypes:
            try:
                result = measure(torch_npu, device, op, dtype_name)
            except Exception as e:  # a kernel that refuses the documented call is a failure, named
                check.fail(f"{op} {dtype_name}: {type(e).__name__}: {e}")
                continue
            check.value.setdefault(op, {})[dtype_name] = result
            if not result["margin"] <= 1.0:
                check.fail(f"{op} {dtype_name}: max error {result['max_abs_err']:.3e} exceeds the tolerance "
                           f"(rtol {result['rtol']:.3g}, atol {result['atol']:.3g}) by a factor {result['margin']:.2f}")
    if emulated:
        check.device_only.append("torch_npu's device kernels (RmsNorm, SwiGlu, RotaryMul, FlashAttentionScore)")
        check.stands_in.append("the emulator's ops in each dtype against their own float32 result "
                               "(rounding to the dtype, within the same tolerances)")
    return check
