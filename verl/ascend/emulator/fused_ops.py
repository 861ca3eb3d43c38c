"""CPU reference implementations of the torch_npu fused ops that verl-ascend uses.

They serve two purposes: they are the fused ops of the stand-in ``torch_npu`` (so patched
models run on a CPU machine), and they are the *documented* numerics a real NPU is
compared against in ``tests/npu``. Each op therefore checks its inputs the way the real
kernel's contract is documented (shape, dtype, layout) and raises a clear error where the
real op would refuse, so a patch that only works by accident on CPU fails here too.

Numerics: every op computes in float32 and rounds once to the input dtype, the way the
fused kernels do; unfused PyTorch code rounds after each step, so in bf16/fp16 the two
differ by about one unit in the last place. Gradients come from autograd over the same
float32 graph, which is what the fused backward kernels (RmsNormGrad, RotaryMulGrad,
SwiGluGrad) compute.

Sources (read, not copied): the ``torch_npu`` op docstrings and meta registrations, as
summarised in the project's notes/npu-stack.md.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from verl.ascend.ops.limits import ROTARY_MAX_HEAD_DIM

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Half-mode rotary: which leading dims of r1/r2 may be full (1) or broadcast (0), per layout,
# for x = (d0, d1, d2, D). From the op contract: BNSD -> 11SD/B1SD/BNSD, BSND -> 1S1D/BS1D/BSND,
# SBND -> S11D/SB1D/SBND.
ROTARY_HALF_LAYOUT_MASKS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "BNSD": ((0, 0, 1), (1, 0, 1), (1, 1, 1)),
    "BSND": ((0, 1, 0), (1, 1, 0), (1, 1, 1)),
    "SBND": ((1, 0, 0), (1, 1, 0), (1, 1, 1)),
}


def _check_float(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the trailing ``gamma.ndim`` dims of ``x``; returns ``(y, rstd)``.

    ``y = x / sqrt(mean(x**2) + epsilon) * gamma`` in ``x.dtype``; ``rstd`` is float32 with
    shape ``x.shape[:x.ndim - gamma.ndim] + (1,) * gamma.ndim``.
    """
    _check_float("x", x)
    _check_float("gamma", gamma)
    if gamma.ndim < 1 or gamma.ndim > x.ndim:
        raise ValueError(
            f"npu_rms_norm: gamma must have 1..x.ndim dims, got gamma {tuple(gamma.shape)} for x {tuple(x.shape)}"
        )
    if tuple(x.shape[x.ndim - gamma.ndim :]) != tuple(gamma.shape):
        raise ValueError(
            f"npu_rms_norm: the trailing dims of x {tuple(x.shape)} must equal gamma's shape {tuple(gamma.shape)}"
        )
    if x.dtype != gamma.dtype:
        raise TypeError(f"npu_rms_norm: x ({x.dtype}) and gamma ({gamma.dtype}) must have the same dtype")
    dims = tuple(range(x.ndim - gamma.ndim, x.ndim))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + epsilon)
    y = (xf * rstd * gamma.float()).to(x.dtype)
    return y, rstd


def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """SwiGLU: split ``x`` in halves ``a, b`` along ``dim``; return ``silu(a) * b`` in ``x.dtype``."""
    _check_float("x", x)
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"npu_swiglu: dim {dim} out of range for a {x.ndim}-d tensor")
    if x.shape[dim] % 2:
        raise ValueError(f"npu_swiglu: size {x.shape[dim]} of dim {dim} must be even (two halves: gate, up)")
    a, b = x.float().chunk(2, dim=dim)
    return (F.silu(a) * b).to(x.dtype)


def _rotary_masks(x_shape: tuple[int, ...], r_shape: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """All full(1)/broadcast(0) readings of r's three leading dims consistent with the shapes."""
    options = []
    for xd, rd in zip(x_shape[:3], r_shape[:3], strict=True):
        if rd == xd and xd == 1:
            options.append((0, 1))
        elif rd == xd:
            options.append((1,))
        elif rd == 1:
            options.append((0,))
        else:
            return []
    return [tuple(m) for m in itertools.product(*options)]


def rotary_layouts_for(x_shape: tuple[int, ...], r_shape: tuple[int, ...]) -> list[str]:
    """The documented layouts under which half-mode ``npu_rotary_mul`` accepts these shapes."""
    masks = set(_rotary_masks(tuple(x_shape), tuple(r_shape)))
    return [name for name, allowed in ROTARY_HALF_LAYOUT_MASKS.items() if masks.intersection(allowed)]


def npu_rotary_mul(
    x: torch.Tensor,
    r1: torch.Tensor,
    r2: torch.Tensor,
    rotary_mode: str = "half",
    rotate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotary embedding ``r1 * x + r2 * rot(x)`` on a 4-d ``x`` (BNSD, BSND or SBND).

    ``rotary_mode="half"``: ``rot(x) = cat(-x2, x1)`` of the two halves of the last dim (HF's
    ``rotate_half``). ``"interleave"``: ``rot(x)`` pairs even/odd elements,
    ``(-x1, x0, -x3, x2, ...)``. ``r1`` (cos) and ``r2`` (sin) span the full head dim.
    """
    for name, t in (("x", x), ("r1", r1), ("r2", r2)):
        _check_float(name, t)
    if rotate is not None:
        raise NotImplementedError("npu_rotary_mul emulator: the `rotate` matrix argument is not supported")
    if rotary_mode not in ("half", "interleave"):
        raise ValueError(f"npu_rotary_mul: rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    if x.ndim != 4:
        raise ValueError(f"npu_rotary_mul: x must be 4-d (BNSD, BSND or SBND), got shape {tuple(x.shape)}")
    head_dim = x.shape[-1]
    if head_dim % 2 or head_dim >= ROTARY_MAX_HEAD_DIM:
        raise ValueError(f"npu_rotary_mul: head dim D={head_dim} must be even and < {ROTARY_MAX_HEAD_DIM}")
    if r1.shape != r2.shape:
        raise ValueError(f"npu_rotary_mul: r1 {tuple(r1.shape)} and r2 {tuple(r2.shape)} must have the same shape")
    if r1.ndim != 4 or r1.shape[-1] != head_dim:
        raise ValueError(
            f"npu_rotary_mul: r1/r2 must be 4-d with last dim D={head_dim}, "
            f"got {tuple(r1.shape)} for x {tuple(x.shape)}"
        )
    if not (x.dtype == r1.dtype == r2.dtype):
        raise TypeError(f"npu_rotary_mul: x, r1, r2 must share a dtype, got {x.dtype}, {r1.dtype}, {r2.dtype}")
    if rotary_mode == "half" and not rotary_layouts_for(tuple(x.shape), tuple(r1.shape)):
        raise ValueError(
            f"npu_rotary_mul: r shape {tuple(r1.shape)} does not broadcast to x {tuple(x.shape)} in any supported "
            "layout (BNSD: 11SD/B1SD/BNSD, BSND: 1S1D/BS1D/BSND, SBND: S11D/SB1D/SBND)"
        )
    if rotary_mode == "interleave" and any(rd not in (1, xd) for rd, xd in zip(r1.shape, x.shape, strict=True)):
        raise ValueError(f"npu_rotary_mul: r shape {tuple(r1.shape)} does not broadcast to x {tuple(x.shape)}")
    xf = x.float()
    if rotary_mode == "half":
        x1, x2 = xf.chunk(2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
    else:
        rotated = torch.stack((-xf[..., 1::2], xf[..., 0::2]), dim=-1).flatten(-2)
    return (r1.float() * xf + r2.float() * rotated).to(x.dtype)


FUSION_ATTENTION_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
COMPRESSED_CAUSAL_MASK = 2048  # sparse_mode 2/3 take a 2048x2048 upper-triangular bool mask


def _to_bnsd(t: torch.Tensor, layout: str, head_num: int | None, head_dim: int | None) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout in ("BSH", "SBH"):
        if t.ndim != 3:
            raise ValueError(f"npu_fusion_attention: layout {layout} needs 3-d inputs, got {tuple(t.shape)}")
        if layout == "SBH":
            t = t.transpose(0, 1)
        b, s, h = t.shape
        heads = head_num if head_num is not None else h // head_dim
        if h % heads:
            raise ValueError(f"npu_fusion_attention: hidden size {h} is not a multiple of head_num {heads}")
        return t.reshape(b, s, heads, h // heads).transpose(1, 2)
    raise ValueError(f"npu_fusion_attention: input_layout {layout!r} not one of {FUSION_ATTENTION_LAYOUTS}")


def _from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    b, n, s, d = t.shape
    t = t.transpose(1, 2).reshape(b, s, n * d)
    return t.transpose(0, 1) if layout == "SBH" else t


def _attention_bnsd(q, k, v, *, pse, atten_mask, scale, keep_prob, pre_tockens, next_tockens, sparse_mode):
    """softmax(mask(scale * (pse + q k^T))) v in float32, GQA by repeating k/v heads."""
    n, n_kv = q.shape[1], k.shape[1]
    if n % n_kv:
        raise ValueError(f"npu_fusion_attention: {n} query heads are not a multiple of {n_kv} key/value heads")
    if n_kv != n:
        k = k.repeat_interleave(n // n_kv, dim=1)
        v = v.repeat_interleave(n // n_kv, dim=1)
    scores = q.float() @ k.float().transpose(-1, -2)
    if pse is not None:
        scores = scores + pse.float()
    scores = scores * scale
    s_q, s_kv = scores.shape[-2], scores.shape[-1]
    i = torch.arange(s_q, device=scores.device)[:, None]
    j = torch.arange(s_kv, device=scores.device)[None, :]
    if sparse_mode == 0:
        masked = (j - i > next_tockens) | (i - j > pre_tockens)
        if atten_mask is not None:
            masked = masked | atten_mask.bool()
    elif sparse_mode == 2:
        masked = j > i
    else:  # 3: causal, bottom-right aligned
        masked = j > i + (s_kv - s_q)
    scores = scores.masked_fill(masked, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # fully masked rows attend to nothing
    if keep_prob < 1.0:
        probs = F.dropout(probs, p=1.0 - keep_prob, training=True)
    return probs @ v.float()


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix=None,
    actual_seq_qlen=None,
    actual_seq_kvlen=None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    **unused,
):
    """Flash attention ``softmax(mask(scale * (pse + q k^T))) v``; returns a tuple whose [0] is the output.

    Layouts BSH, SBH, BSND, BNSD and TND (packed tokens; ``actual_seq_qlen``/``actual_seq_kvlen``
    are cumulative end offsets). ``atten_mask`` True = masked out. ``sparse_mode`` 0 uses
    ``atten_mask`` (and the ``pre_tockens``/``next_tockens`` band), 2/3 are causal aligned
    top-left/bottom-right and take the compressed 2048x2048 mask. Key/value may have fewer
    heads than the query (GQA). The other tuple members (softmax statistics, dropout seed)
    are placeholders.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_float(name, t)
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"npu_fusion_attention: q/k/v dtypes differ: {query.dtype}, {key.dtype}, {value.dtype}")
    if input_layout not in FUSION_ATTENTION_LAYOUTS:
        raise ValueError(f"npu_fusion_attention: input_layout {input_layout!r} not one of {FUSION_ATTENTION_LAYOUTS}")
    if padding_mask is not None:
        raise NotImplementedError("npu_fusion_attention: padding_mask is reserved and must be None")
    if sparse_mode not in (0, 2, 3):
        raise NotImplementedError(f"npu_fusion_attention emulator: sparse_mode {sparse_mode} (supported: 0, 2, 3)")
    if sparse_mode in (2, 3) and (
        atten_mask is None or tuple(atten_mask.shape[-2:]) != (COMPRESSED_CAUSAL_MASK, COMPRESSED_CAUSAL_MASK)
    ):
        raise ValueError(
            f"npu_fusion_attention: sparse_mode {sparse_mode} needs the compressed "
            f"{COMPRESSED_CAUSAL_MASK}x{COMPRESSED_CAUSAL_MASK} causal atten_mask"
        )
    if not 0.0 < keep_prob <= 1.0:
        raise ValueError(f"npu_fusion_attention: keep_prob must be in (0, 1], got {keep_prob}")
    opts = dict(
        pse=pse,
        atten_mask=atten_mask if sparse_mode == 0 else None,
        scale=scale,
        keep_prob=keep_prob,
        pre_tockens=pre_tockens,
        next_tockens=next_tockens,
        sparse_mode=sparse_mode,
    )
    if input_layout == "TND":
        if query.ndim != 3 or actual_seq_qlen is None or actual_seq_kvlen is None:
            raise ValueError(
                "npu_fusion_attention: TND needs 3-d (T, N, D) inputs and actual_seq_qlen/actual_seq_kvlen"
            )
        q_ends, kv_ends = [int(x) for x in actual_seq_qlen], [int(x) for x in actual_seq_kvlen]
        if len(q_ends) != len(kv_ends) or q_ends[-1] != query.shape[0] or kv_ends[-1] != key.shape[0]:
            raise ValueError(
                "npu_fusion_attention: actual_seq_qlen/actual_seq_kvlen must be cumulative ends of the same number of "
                f"sequences ending at T_q={query.shape[0]}, T_kv={key.shape[0]}; got {q_ends}, {kv_ends}"
            )
        outs, q_start, kv_start = [], 0, 0
        for q_end, kv_end in zip(q_ends, kv_ends, strict=True):
            q_seg = query[q_start:q_end].transpose(0, 1).unsqueeze(0)
            k_seg = key[kv_start:kv_end].transpose(0, 1).unsqueeze(0)
            v_seg = value[kv_start:kv_end].transpose(0, 1).unsqueeze(0)
            seg = dict(opts, pse=None if pse is None else pse)
            outs.append(_attention_bnsd(q_seg, k_seg, v_seg, **seg)[0].transpose(0, 1))
            q_start, kv_start = q_end, kv_end
        out = torch.cat(outs, dim=0).to(query.dtype)
    else:
        head_dim = query.shape[-1] // head_num if input_layout in ("BSH", "SBH") else None
        q = _to_bnsd(query, input_layout, head_num, head_dim)
        k = _to_bnsd(key, input_layout, None, q.shape[-1])
        v = _to_bnsd(value, input_layout, None, q.shape[-1])
        if q.shape[1] != head_num:
            raise ValueError(f"npu_fusion_attention: head_num={head_num} but the query has {q.shape[1]} heads")
        out = _from_bnsd(_attention_bnsd(q, k, v, **opts).to(query.dtype), input_layout)
    placeholder = torch.zeros(0, device=query.device)
    return out, placeholder, placeholder, placeholder, 0, 0, 0


FUSED_OPS = {
    "npu_rms_norm": npu_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_rotary_mul": npu_rotary_mul,
    "npu_fusion_attention": npu_fusion_attention,
}
