"""``npu_fusion_attention`` (what transformers' NPU flash-attention path calls) against SDPA.

Reference: ``torch.nn.functional.scaled_dot_product_attention`` in float64. Tolerance: float32
1e-5; bfloat16 2**-7 relative + 1e-2 absolute (a softmax-weighted sum of bf16 values).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from verl.ascend.ops.limits import OP_TOLERANCES

MASK = torch.triu(torch.ones(2048, 2048), diagonal=1).bool()  # the compressed causal mask


def rand(*shape, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype).to(device)


def sdpa(q, k, v, causal=False, bottom_right=False, scale=None):
    """BNSD float64 reference with GQA and top-left / bottom-right causal masks."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    mask = None
    if causal:
        s_q, s_kv = q.shape[-2], k.shape[-2]
        offset = s_kv - s_q if bottom_right else 0
        mask = torch.ones(s_q, s_kv, dtype=torch.bool).tril(diagonal=offset)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def check(out, ref, dtype):
    tol, atol = OP_TOLERANCES["npu_fusion_attention"][str(dtype).removeprefix("torch.")]
    torch.testing.assert_close(out.detach().cpu().double(), ref, rtol=tol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
def test_layouts_match_sdpa(torch_npu, npu_device, dtype, layout):
    b, n, s, d = 2, 4, 7, 16
    q, k, v = (rand(b, n, s, d, seed=i, dtype=dtype) for i in range(3))
    to_layout = {
        "BNSD": lambda t: t,
        "BSND": lambda t: t.transpose(1, 2),
        "BSH": lambda t: t.transpose(1, 2).reshape(b, s, n * d),
        "SBH": lambda t: t.transpose(1, 2).reshape(b, s, n * d).transpose(0, 1),
    }[layout]
    from_layout = {
        "BNSD": lambda t: t,
        "BSND": lambda t: t.transpose(1, 2),
        "BSH": lambda t: t.reshape(b, s, n, d).transpose(1, 2),
        "SBH": lambda t: t.transpose(0, 1).reshape(b, s, n, d).transpose(1, 2),
    }[layout]
    scale = 1 / math.sqrt(d)
    out = torch_npu.npu_fusion_attention(
        *(to_layout(t).contiguous().to(npu_device) for t in (q, k, v)), n, layout, scale=scale
    )[0]
    check(from_layout(out.cpu()), sdpa(q, k, v, scale=scale), dtype)


@pytest.mark.parametrize("sparse_mode,bottom_right", [(2, False), (3, True)])
def test_causal_modes_with_the_compressed_mask(torch_npu, npu_device, sparse_mode, bottom_right):
    q = rand(1, 2, 5, 8, seed=1)
    k, v = rand(1, 2, 9, 8, seed=2), rand(1, 2, 9, 8, seed=3)
    out = torch_npu.npu_fusion_attention(
        q.to(npu_device),
        k.to(npu_device),
        v.to(npu_device),
        2,
        "BNSD",
        atten_mask=MASK.to(npu_device),
        sparse_mode=sparse_mode,
        scale=0.25,
    )[0]
    check(out, sdpa(q, k, v, causal=True, bottom_right=bottom_right, scale=0.25), torch.float32)


def test_explicit_mask_and_gqa(torch_npu, npu_device):
    q, k, v = rand(2, 4, 6, 8, seed=1), rand(2, 2, 6, 8, seed=2), rand(2, 2, 6, 8, seed=3)
    mask = torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)  # True = masked out
    out = torch_npu.npu_fusion_attention(
        q.to(npu_device), k.to(npu_device), v.to(npu_device), 4, "BNSD", atten_mask=mask.to(npu_device), scale=0.3
    )[0]
    check(out, sdpa(q, k, v, causal=True, scale=0.3), torch.float32)


def test_tnd_packed_sequences_attend_within_their_own_sequence(torch_npu, npu_device):
    lengths, n, d = [3, 5, 2], 2, 8
    total = sum(lengths)
    q, k, v = (rand(total, n, d, seed=i) for i in range(3))
    ends = tuple(torch.tensor(lengths).cumsum(0).tolist())
    out = torch_npu.npu_fusion_attention(
        q.to(npu_device),
        k.to(npu_device),
        v.to(npu_device),
        n,
        input_layout="TND",
        scale=0.35,
        atten_mask=MASK.to(npu_device),
        sparse_mode=3,
        actual_seq_qlen=ends,
        actual_seq_kvlen=ends,
    )[0]
    start, refs = 0, []
    for end in ends:
        seg = [t[start:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v)]
        refs.append(sdpa(*seg, causal=True, bottom_right=True, scale=0.35)[0].transpose(0, 1))
        start = end
    check(out, torch.cat(refs), torch.float32)


def test_causal_mode_without_the_compressed_mask_is_refused(torch_npu, npu_device):
    q = rand(1, 2, 4, 8).to(npu_device)
    with pytest.raises((ValueError, RuntimeError)):
        torch_npu.npu_fusion_attention(q, q, q, 2, "BNSD", sparse_mode=2)
