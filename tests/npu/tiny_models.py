"""Tiny, deterministic HF models built from configs (no hub, no files) for the NPU tests."""

from __future__ import annotations

import torch

TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


def tiny_config(model_type: str, **overrides):
    from transformers import LlamaConfig, Qwen2Config

    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[model_type]
    config = cls(**{**TINY, **overrides})
    config._attn_implementation = "eager"
    return config


def build(model_type: str, seed: int = 0, dtype=torch.float32, device="cpu", **overrides):
    """A causal LM with seeded random weights; same seed -> same weights."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(model_type, **overrides), attn_implementation="eager")
    # Random (not identity) norm weights so RMSNorm's scale is exercised too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model.to(dtype=dtype, device=device)


def batch(seed: int = 1, batch_size: int = 2, seq: int = 11, vocab: int = TINY["vocab_size"], device="cpu"):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (batch_size, seq), generator=g)
    labels = torch.randint(0, vocab, (batch_size, seq), generator=g)
    return input_ids.to(device), labels.to(device)


def logits_and_grads(model, input_ids, labels):
    """Forward + backward of a token-level cross entropy; returns (logits, {param: grad})."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids)
    loss = torch.nn.functional.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), grads
