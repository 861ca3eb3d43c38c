"""Upstream's FSDP engine builds and steps the fused-op-patched model under the Ascend platform.

The fallback for the end-to-end check: ``FSDPEngineWithLMHead`` (FSDP2, one gloo rank) is
built from the recipe's tiny Qwen2 checkpoint on the Ascend platform; its own NPU hook
patches the model (no call from the test), the fused kernels run in its forward, and an
optimizer step moves the weights. The patched forward matches the same FSDP module with the
patches reverted, within bf16 tolerance (FSDP computes in bf16 by default): 2**-5 absolute
on O(1) logits.
"""

from __future__ import annotations

import socket

import pytest
import torch

from verl.ascend.ops import applied_reports, revert_fused_ops


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tiny_checkpoint(tmp_path):
    from recipe.dapo_ascend.tiny.assets import build_model, build_tokenizer

    path = tmp_path / "model"
    build_tokenizer().save_pretrained(path)
    build_model(seed=0).save_pretrained(path)
    return path


@pytest.fixture
def process_group(monkeypatch, npu_device):
    if torch.distributed.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    for key, value in dict(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    ).items():
        monkeypatch.setenv(key, value)
    torch.distributed.init_process_group("gloo" if npu_device == "cpu" else "hccl", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()
    revert_fused_ops()


def test_fsdp_engine_builds_and_steps_the_patched_model(
    tiny_checkpoint, process_group, torch_npu, monkeypatch, npu_device
):
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    calls = {"npu_rms_norm": 0, "npu_swiglu": 0, "npu_rotary_mul": 0}
    for name in calls:
        original = getattr(torch_npu, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch_npu, name, spy)

    model_config = HFModelConfig(path=str(tiny_checkpoint), override_config={"attn_implementation": "eager"})
    engine = FSDPEngineWithLMHead(
        model_config,
        FSDPEngineConfig(strategy="fsdp2", use_torch_compile=False),
        FSDPOptimizerConfig(lr=1e-2, clip_grad=1.0),
        CheckpointConfig(),
    )
    report = applied_reports()[-1]
    assert report.model_type == "qwen2" and len(report.active) == 3, report.summary()
    engine.initialize()
    assert type(engine.module).__name__.startswith("FSDP")

    input_ids = torch.randint(0, 10, (2, 9), generator=torch.Generator().manual_seed(0)).to(npu_device)
    logits = engine.module(input_ids=input_ids).logits
    assert calls["npu_rms_norm"] > 0 and calls["npu_swiglu"] > 0 and calls["npu_rotary_mul"] > 0

    revert_fused_ops()
    with torch.no_grad():
        plain = engine.module(input_ids=input_ids).logits
    assert (logits.float() - plain.float()).abs().max().item() <= 2.0**-5

    before = [p.detach().clone() for p in engine.module.parameters()]
    logits.float().logsumexp(-1).mean().backward()
    grad_norm = engine.optimizer_step()
    assert grad_norm > 0 and torch.isfinite(torch.tensor(grad_norm))
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, engine.module.parameters(), strict=True))
