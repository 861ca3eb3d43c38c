"""Each torch_npu fused op against a plain-PyTorch reference (emulator on CPU, or a real NPU).

Tolerances (vs. a float64 reference computed from the same inputs), the documented ones of
``verl.ascend.ops.limits.OP_TOLERANCES`` (the acceptance command holds the device to them too):
- float32: atol 1e-5, rtol 1e-5;
- bfloat16: |y - ref| <= 2**-7 * |ref| + 1e-5 (two bf16 roundings, unit roundoff 2**-8);
- float16:  |y - ref| <= 2**-10 * |ref| + 1e-5 (two fp16 roundings, unit roundoff 2**-11).
Inputs are fresh random tensors with odd shapes; every documented rotary layout is covered.
"""

from __future__ import annotations

import pytest
import torch

from verl.ascend.ops.limits import ELEMENTWISE_TOLERANCES

REL_TOL = {getattr(torch, name): rtol for name, (rtol, _atol) in ELEMENTWISE_TOLERANCES.items()}
ATOL = {getattr(torch, name): atol for name, (_rtol, atol) in ELEMENTWISE_TOLERANCES.items()}


def assert_close_to_reference(actual: torch.Tensor, reference64: torch.Tensor, dtype: torch.dtype) -> None:
    assert actual.dtype == dtype
    actual = actual.detach().cpu().double()
    bound = REL_TOL[dtype] * reference64.abs() + ATOL[dtype]
    err = (actual - reference64).abs()
    worst = (err - bound).max().item()
    assert worst <= 0, f"max error exceeds tolerance by {worst:.3e} (max err {err.max().item():.3e})"


def rand(*shape, dtype=torch.float32, device="cpu", seed=None, scale=1.0):
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 2**31)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype).to(device)


# ---------------------------------------------------------------------------- npu_rms_norm


def rms_norm_reference(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x64, g64 = x.double().cpu(), gamma.double().cpu()
    dims = tuple(range(x.ndim - gamma.ndim, x.ndim))
    ms = (x64 * x64).sum(dim=dims, keepdim=True) / g64.numel()
    rstd = 1.0 / torch.sqrt(ms + eps)
    return x64 * rstd * g64, rstd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("x_shape,gamma_shape", [((3, 5, 7), (7,)), ((2, 9, 33), (33,)), ((5, 3, 6), (3, 6))])
def test_rms_norm_matches_reference(torch_npu, npu_device, dtype, x_shape, gamma_shape):
    x = rand(*x_shape, dtype=dtype, device=npu_device)
    gamma = rand(*gamma_shape, dtype=dtype, device=npu_device, seed=7) + 1.0
    y, rstd = torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6)
    ref, ref_rstd = rms_norm_reference(x, gamma, 1e-6)
    assert_close_to_reference(y, ref, dtype)
    assert rstd.dtype == torch.float32
    expected_rstd_shape = x_shape[: len(x_shape) - len(gamma_shape)] + (1,) * len(gamma_shape)
    assert tuple(rstd.shape) == expected_rstd_shape
    torch.testing.assert_close(rstd.cpu().double(), ref_rstd, rtol=1e-4, atol=1e-6)


def test_rms_norm_gradients_match_reference(torch_npu, npu_device):
    x = rand(4, 3, 10, device=npu_device).requires_grad_()
    gamma = (rand(10, device=npu_device, seed=3) + 1.0).requires_grad_()
    upstream = rand(4, 3, 10, device=npu_device, seed=11)
    y, _ = torch_npu.npu_rms_norm(x, gamma, epsilon=1e-5)
    gx, gg = torch.autograd.grad(y, (x, gamma), upstream)

    x_ref = x.detach().cpu().double().requires_grad_()
    g_ref = gamma.detach().cpu().double().requires_grad_()
    ref, _ = rms_norm_reference(x_ref, g_ref, 1e-5)
    rx, rg = torch.autograd.grad(ref, (x_ref, g_ref), upstream.cpu().double())
    torch.testing.assert_close(gx.cpu().double(), rx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gg.cpu().double(), rg, rtol=1e-4, atol=1e-5)


def test_rms_norm_rejects_bad_inputs(torch_npu, npu_device):
    x = rand(2, 4, 8, device=npu_device)
    with pytest.raises((ValueError, RuntimeError)):
        torch_npu.npu_rms_norm(x, rand(5, device=npu_device))  # trailing dims differ
    with pytest.raises((TypeError, RuntimeError)):
        torch_npu.npu_rms_norm(x.long(), rand(8, device=npu_device).long())  # not a float type


# ---------------------------------------------------------------------------- npu_swiglu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,dim", [((3, 5, 14), -1), ((6, 7), 0), ((5, 10, 3), 1), ((2, 3, 22), 2)])
def test_swiglu_matches_reference(torch_npu, npu_device, dtype, shape, dim):
    x = rand(*shape, dtype=dtype, device=npu_device, scale=2.0)
    y = torch_npu.npu_swiglu(x, dim=dim)
    x64 = x.double().cpu()
    a, b = x64.chunk(2, dim=dim)
    ref = a / (1.0 + torch.exp(-a)) * b
    assert tuple(y.shape) == tuple(ref.shape)
    assert_close_to_reference(y, ref, dtype)


def test_swiglu_gradient_matches_reference(torch_npu, npu_device):
    x = rand(3, 4, 12, device=npu_device).requires_grad_()
    upstream = rand(3, 4, 6, device=npu_device, seed=5)
    (gx,) = torch.autograd.grad(torch_npu.npu_swiglu(x, dim=-1), (x,), upstream)
    x_ref = x.detach().cpu().double().requires_grad_()
    a, b = x_ref.chunk(2, dim=-1)
    (rx,) = torch.autograd.grad(a * torch.sigmoid(a) * b, (x_ref,), upstream.cpu().double())
    torch.testing.assert_close(gx.cpu().double(), rx, rtol=1e-4, atol=1e-5)


def test_swiglu_rejects_odd_split(torch_npu, npu_device):
    with pytest.raises((ValueError, RuntimeError)):
        torch_npu.npu_swiglu(rand(3, 7, device=npu_device), dim=-1)


# ---------------------------------------------------------------------------- npu_rotary_mul


def rope_tables(seq: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin (S, D) as HF builds them: angles for D/2 frequencies, duplicated across halves."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float64) + seed, inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


def rotary_half_reference_complex(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as a complex rotation of pairs (x[k], x[k + D/2]) by angle theta_k (independent formulation)."""
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half], x[..., half:])
    rot = torch.complex(cos[..., :half], sin[..., :half])
    out = z * rot
    return torch.cat((out.real, out.imag), dim=-1)


# (layout, x shape, which leading dims of r are full) -- every documented half-mode pattern
LAYOUT_CASES = [
    ("BNSD", (2, 3, 5, 8), (0, 0, 1)),
    ("BNSD", (2, 3, 5, 8), (1, 0, 1)),
    ("BNSD", (2, 3, 5, 8), (1, 1, 1)),
    ("BSND", (2, 5, 3, 16), (0, 1, 0)),
    ("BSND", (2, 5, 3, 16), (1, 1, 0)),
    ("BSND", (2, 5, 3, 16), (1, 1, 1)),
    ("SBND", (5, 2, 3, 8), (1, 0, 0)),
    ("SBND", (5, 2, 3, 8), (1, 1, 0)),
    ("SBND", (5, 2, 3, 8), (1, 1, 1)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout,x_shape,mask", LAYOUT_CASES)
def test_rotary_half_matches_reference_in_every_layout(torch_npu, npu_device, dtype, layout, x_shape, mask):
    x = rand(*x_shape, dtype=dtype, device=npu_device)
    r_shape = [x_shape[i] if mask[i] else 1 for i in range(3)]
    # Random angles per (full) position, duplicated across the two halves as HF's tables are.
    theta = rand(*r_shape, x_shape[-1] // 2, seed=sum(mask) + 13, scale=3.0).double()
    cos = torch.cat((theta.cos(), theta.cos()), dim=-1).to(dtype)
    sin = torch.cat((theta.sin(), theta.sin()), dim=-1).to(dtype)
    y = torch_npu.npu_rotary_mul(x, cos.to(npu_device), sin.to(npu_device))
    ref = rotary_half_reference_complex(x.double().cpu(), cos.double().expand(x_shape), sin.double().expand(x_shape))
    assert_close_to_reference(y, ref, dtype)


def test_rotary_half_with_arbitrary_tables_follows_the_formula(torch_npu, npu_device):
    """r1/r2 need not be RoPE tables: out = r1 * x + r2 * cat(-x2, x1)."""
    x = rand(2, 3, 5, 12, device=npu_device)
    r1, r2 = rand(1, 1, 5, 12, device=npu_device, seed=1), rand(1, 1, 5, 12, device=npu_device, seed=2)
    y = torch_npu.npu_rotary_mul(x, r1, r2)
    x64 = x.double().cpu()
    idx = torch.arange(12)
    partner = (idx + 6) % 12  # element k pairs with k+D/2 (and back)
    sign = torch.where(idx < 6, -1.0, 1.0).double()
    ref = r1.double().cpu() * x64 + r2.double().cpu() * sign * x64[..., partner]
    assert_close_to_reference(y, ref, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_interleave_matches_complex_rotation(torch_npu, npu_device, dtype):
    b, n, s, d = 2, 3, 7, 10
    x = rand(b, n, s, d, dtype=dtype, device=npu_device)
    theta = rand(1, 1, s, d // 2, seed=4, scale=3.0).double()
    cos = theta.cos().repeat_interleave(2, dim=-1)
    sin = theta.sin().repeat_interleave(2, dim=-1)
    y = torch_npu.npu_rotary_mul(
        x, cos.to(dtype).to(npu_device), sin.to(dtype).to(npu_device), rotary_mode="interleave"
    )
    x64 = x.double().cpu()
    z = torch.complex(x64[..., 0::2], x64[..., 1::2]) * torch.complex(
        cos.to(dtype).double()[..., 0::2], sin.to(dtype).double()[..., 0::2]
    )
    ref = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
    assert_close_to_reference(y, ref, dtype)


def test_rotary_gradients_match_reference(torch_npu, npu_device):
    x = rand(2, 3, 5, 8, device=npu_device).requires_grad_()
    cos_sd, sin_sd = rope_tables(5, 8)
    cos = cos_sd.float().reshape(1, 1, 5, 8).to(npu_device)
    sin = sin_sd.float().reshape(1, 1, 5, 8).to(npu_device)
    upstream = rand(2, 3, 5, 8, device=npu_device, seed=9)
    (gx,) = torch.autograd.grad(torch_npu.npu_rotary_mul(x, cos, sin), (x,), upstream)
    x_ref = x.detach().cpu().double().requires_grad_()
    ref = rotary_half_reference_complex(
        x_ref, cos.cpu().double().expand(2, 3, 5, 8), sin.cpu().double().expand(2, 3, 5, 8)
    )
    (rx,) = torch.autograd.grad(ref, (x_ref,), upstream.cpu().double())
    torch.testing.assert_close(gx.cpu().double(), rx, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "x_shape,r_shape",
    [
        ((2, 3, 5, 8), (1, 3, 5, 8)),  # 1NSD is not a documented pattern in any layout
        ((2, 3, 5, 8), (1, 1, 1, 8)),  # 111D neither
        ((2, 3, 5, 8), (2, 3, 4, 8)),  # does not broadcast
        ((2, 3, 5, 9), (1, 1, 5, 9)),  # odd head dim
        ((3, 5, 8), (1, 5, 8)),  # not 4-d
    ],
)
def test_rotary_rejects_unsupported_shapes(torch_npu, npu_device, x_shape, r_shape):
    x = rand(*x_shape, device=npu_device)
    r = rand(*r_shape, device=npu_device, seed=1)
    with pytest.raises((ValueError, RuntimeError)):
        torch_npu.npu_rotary_mul(x, r, r)
