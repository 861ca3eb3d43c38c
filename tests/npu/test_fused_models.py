"""Patched tiny Qwen2 / Llama give the logits and gradients of the unpatched models.

Tolerances: float32 -- logits and gradients equal to 1e-5 (the fused ops compute the same
float32 maths); bfloat16 -- logits within 2**-6 absolute (logits are O(1): about two bf16
ulps) and every gradient tensor within 5% of its largest entry (fused kernels round once
where the unpatched layers round after each step; the differences add up over 2 layers).
Spies on the torch_npu ops prove the fused kernels actually ran.
"""

from __future__ import annotations

import logging

import pytest
import torch

from recipe.dapo_ascend.tiny.assets import MODEL_SPECS, VOCAB, build_model
from verl.ascend.ops import FusedOpSwitches, applied_reports, apply_fused_ops, revert_fused_ops
from verl.ascend.ops.targets import ARCH_TARGETS

OPS_TO_KERNEL = {"rms_norm": "npu_rms_norm", "swiglu": "npu_swiglu", "rotary_mul": "npu_rotary_mul"}
# The tiny assets' model with four query heads over two key/value heads (the rotary kernel sees
# grouped heads) and its own output head, in eager attention.
SHAPE = dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, attn_implementation="eager")


def tiny(arch, dtype=torch.float32, device="cpu", **overrides):
    """The tiny model (``recipe.dapo_ascend.tiny.assets.build_model``, seed 0) in ``SHAPE``, its norm
    weights away from 1 so that RMSNorm's scale is exercised too."""
    model = build_model(0, arch=arch, **{**SHAPE, **overrides})
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model.to(dtype=dtype, device=device)


def batch(device="cpu", seed=1, batch_size=2, seq=11):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, len(VOCAB), (batch_size, seq), generator=g)
    labels = torch.randint(0, len(VOCAB), (batch_size, seq), generator=g)
    return input_ids.to(device), labels.to(device)


def logits_and_grads(model, input_ids, labels):
    """Forward + backward of a token-level cross entropy; returns (logits, {param: grad})."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids)
    loss = torch.nn.functional.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), grads


@pytest.fixture
def spies(torch_npu, monkeypatch):
    """Count calls of each fused torch_npu op (the real ones on an NPU host)."""
    counts = dict.fromkeys(OPS_TO_KERNEL.values(), 0)
    for name in counts:
        original = getattr(torch_npu, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch_npu, name, spy)
    return counts


@pytest.fixture(autouse=True)
def clean_patches():
    revert_fused_ops()
    yield
    revert_fused_ops()


def run_pair(model_type, dtype, device, switches=None):
    model = tiny(model_type, dtype, device)
    ids, labels = batch(device=device)
    ref_logits, ref_grads = logits_and_grads(model, ids, labels)
    report = apply_fused_ops(model_type, switches)
    logits, grads = logits_and_grads(model, ids, labels)
    return report, (ref_logits, ref_grads), (logits, grads)


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
def test_patched_model_matches_unpatched_fp32(model_type, npu_device, spies):
    report, (ref_logits, ref_grads), (logits, grads) = run_pair(model_type, torch.float32, npu_device)
    assert len(report.patched) == 3, report.summary()
    layers = MODEL_SPECS["first_digit"]["num_hidden_layers"]
    assert spies["npu_rms_norm"] == 2 * layers + 1  # two norms per layer + the final norm
    assert spies["npu_swiglu"] == layers
    assert spies["npu_rotary_mul"] == 2 * layers  # q and k
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
def test_patched_model_matches_unpatched_bf16(model_type, npu_device, spies):
    report, (ref_logits, ref_grads), (logits, grads) = run_pair(model_type, torch.bfloat16, npu_device)
    assert spies["npu_swiglu"] > 0 and spies["npu_rms_norm"] > 0 and spies["npu_rotary_mul"] > 0
    assert logits.dtype == ref_logits.dtype == torch.bfloat16
    assert (logits.float() - ref_logits.float()).abs().max().item() <= 2.0**-6
    for name, ref in ref_grads.items():
        bound = 0.05 * ref.float().abs().max().item() + 1e-6
        diff = (grads[name].float() - ref.float()).abs().max().item()
        assert diff <= bound, f"{name}: grad diff {diff:.3e} > {bound:.3e}"


def test_mixed_dtypes_keep_the_original_output_dtype(npu_device):
    """fp32 norm weight on bf16 activations: HF returns fp32 (promotion); so must the fused path."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    norm = Qwen2RMSNorm(16).to(npu_device)
    x = torch.randn(3, 5, 16, device=npu_device).to(torch.bfloat16)
    expected = norm(x)
    apply_fused_ops("qwen2")
    got = norm(x)
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=2.0**-7, atol=1e-5)


@pytest.mark.parametrize("off", ["rms_norm", "swiglu", "rotary_mul"])
def test_each_op_has_its_own_switch(off, npu_device, spies):
    switches = FusedOpSwitches(**{off: False})
    report, (ref_logits, _), (logits, _) = run_pair("qwen2", torch.float32, npu_device, switches)
    assert spies[OPS_TO_KERNEL[off]] == 0
    assert all(spies[k] > 0 for op, k in OPS_TO_KERNEL.items() if op != off)
    assert len(report.patched) == 2 and len(report.switched_off) == 1
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)


def test_switch_from_env_and_master_switch(monkeypatch, npu_device, spies):
    monkeypatch.setenv("VERL_ASCEND_FUSED_SWIGLU", "0")
    report = apply_fused_ops("llama")
    assert not report.switches.swiglu and report.switches.rms_norm
    monkeypatch.setenv("VERL_ASCEND_FUSED_OPS", "0")
    report = apply_fused_ops("llama")  # turning off after the fact restores every original
    assert report.active == [] and len(report.switched_off) == 3
    model = tiny("llama", device=npu_device)
    model(input_ids=batch(device=npu_device)[0])
    assert sum(spies.values()) == 0


def test_bad_switch_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("VERL_ASCEND_FUSED_ROTARY_MUL", "maybe")
    with pytest.raises(ValueError, match="VERL_ASCEND_FUSED_ROTARY_MUL='maybe' is not a boolean: expected one of 1"):
        FusedOpSwitches.from_env()


def test_idempotent_and_revertible():
    import importlib

    module = importlib.import_module(ARCH_TARGETS["qwen2"].module)
    originals = (vars(module.Qwen2RMSNorm)["forward"], vars(module.Qwen2MLP)["forward"], module.apply_rotary_pos_emb)
    first = apply_fused_ops("qwen2")
    second = apply_fused_ops("qwen2")
    assert len(first.patched) == 3 and second.patched == [] and len(second.already) == 3
    assert vars(module.Qwen2MLP)["forward"].__wrapped__ is originals[1]
    restored = revert_fused_ops("qwen2")
    assert len(restored) == 3
    assert (
        vars(module.Qwen2RMSNorm)["forward"],
        vars(module.Qwen2MLP)["forward"],
        module.apply_rotary_pos_emb,
    ) == originals


def test_no_double_patching_after_upstream_npu_patch():
    """If upstream's npu_patch already replaced Qwen2's layers, they are kept, not wrapped again."""
    import importlib

    from verl.models.transformers import npu_patch

    module = importlib.import_module(ARCH_TARGETS["qwen2"].module)
    saved = (vars(module.Qwen2RMSNorm)["forward"], vars(module.Qwen2MLP)["forward"], module.apply_rotary_pos_emb)
    try:
        npu_patch._patch_qwen2()
        report = apply_fused_ops("qwen2")
        assert report.patched == [] and len(report.kept_upstream) == 3
        assert vars(module.Qwen2RMSNorm)["forward"] is npu_patch.rms_norm_forward_npu
        off = apply_fused_ops("qwen2", FusedOpSwitches(rms_norm=False))
        assert off.unrevertible == [ARCH_TARGETS["qwen2"].ops[0].describe(ARCH_TARGETS["qwen2"].module)]
    finally:
        module.Qwen2RMSNorm.forward, module.Qwen2MLP.forward, module.apply_rotary_pos_emb = saved


def test_non_silu_mlp_falls_back_to_the_original(npu_device, spies):
    model = tiny("qwen2", device=npu_device, hidden_act="gelu")
    ids, labels = batch(device=npu_device)
    ref_logits, _ = logits_and_grads(model, ids, labels)
    apply_fused_ops("qwen2")
    logits, _ = logits_and_grads(model, ids, labels)
    assert spies["npu_swiglu"] == 0 and spies["npu_rms_norm"] > 0
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)


def test_report_is_logged_per_model(caplog):
    with caplog.at_level(logging.INFO, logger="verl.ascend.ops"):
        apply_fused_ops("llama")
    line = next(r.getMessage() for r in caplog.records if "model_type='llama'" in r.getMessage())
    for attr in ("LlamaRMSNorm.forward -> torch_npu.npu_rms_norm", "LlamaMLP.forward -> torch_npu.npu_swiglu"):
        assert attr in line
    assert applied_reports()[-1].model_type == "llama"


def test_uncovered_model_gets_one_warning(caplog):
    with caplog.at_level(logging.INFO, logger="verl.ascend.ops"):
        first = apply_fused_ops("gpt2")
        apply_fused_ops("gpt2")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "'gpt2'" in r.getMessage()]
    assert not first.covered
    assert len(warnings) == 1 and "no fused-op coverage" in warnings[0].getMessage()


def test_architectures_upstream_covers_get_upstream_patch():
    from transformers.models.qwen3 import modeling_qwen3

    saved = (
        vars(modeling_qwen3.Qwen3RMSNorm)["forward"],
        vars(modeling_qwen3.Qwen3MLP)["forward"],
        modeling_qwen3.apply_rotary_pos_emb,
    )
    try:
        report = apply_fused_ops("qwen3")
        assert report.upstream_model_patch and report.covered
        assert vars(modeling_qwen3.Qwen3RMSNorm)["forward"].__module__ == "verl.models.transformers.npu_patch"
    finally:
        modeling_qwen3.Qwen3RMSNorm.forward, modeling_qwen3.Qwen3MLP.forward, modeling_qwen3.apply_rotary_pos_emb = (
            saved
        )
