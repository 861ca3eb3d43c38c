"""One training-phase program per card, run twice: under fake tensors to plan, on real tensors to measure.

Why one program for both: the plan is only worth what its agreement with a real run shows, and the
agreement only means something when both execute the same code. ``run_phase`` builds the model class
named by ``config.json`` (transformers), shards it with verl's own ``apply_fsdp2`` and FSDP2's
``MixedPrecisionPolicy`` as verl's FSDP engine configures them (``verl/workers/engine/fsdp/
transformer_impl.py``: model built in ``model_dtype``, computed in ``mixed_precision.param_dtype``, gradients
reduced in ``reduce_dtype``), enables gradient checkpointing the way the engine does (non-reentrant), and
runs one micro-batch the way the engine's padding-free path does: ``ulysses_pad_and_slice_inputs``,
the model, verl's ``entropy_from_logits`` (chunked or not), ``logprobs_from_logits``,
``gather_outputs_and_unpad``, verl's policy-loss function and ``agg_loss``, backward, verl's
``fsdp2_clip_grad_norm_`` (FSDP1's clipping for ``strategy: fsdp``) and the optimizer verl's
``build_optimizer`` makes.

What is not the engine's own code, and why:
- the micro-batch is one packed row of ``tokens`` token ids (padding removal) built here, not
  TransferQueue's nested tensors: the engine's nested-tensor bookkeeping and its ``.item()`` metrics are
  data-dependent, which fake tensors cannot run; their memory is a few integers per token;
- attention is ``sdpa`` (``ATTENTION``, registered in transformers' attention registry) wrapped in the same
  all-to-all as verl's Ulysses patch (``gather_seq_scatter_heads`` / ``gather_heads_scatter_seq``, kv heads
  repeated up to the SP size): verl patches only flash-attention, which needs a GPU/NPU. sdpa's CPU kernel
  keeps O(tokens) memory like flash-attention does; the fused NPU kernel's softmax statistics
  (a few fp32 values per token and head) are not modelled;
- the non-finite-gradient check before ``optimizer.step()`` is skipped (it reads a value).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from types import SimpleNamespace

import torch

ATTENTION = "verl_ascend_ulysses_sdpa"
_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
           "fp16": torch.float16, "float16": torch.float16}


@dataclass(frozen=True)
class StepShape:
    """Everything that changes one card's memory in a training phase (hashable: the plan caches on it)."""

    architecture: str  # config.json's contents, JSON text (sorted keys)
    world_size: int  # ranks the FSDP mesh shards over
    sp: int  # Ulysses sequence-parallel size
    tokens: int  # tokens of the largest micro-batch, whole SP group (before SP slicing)
    seq_len: int  # one sequence (prompt + response); packed sequences restart positions
    response_len: int
    remove_padding: bool = True
    strategy: str = "fsdp2"  # actor.strategy: the gradient clipping differs (see _clip_like_fsdp1)
    accumulating: bool = False  # a later micro-batch of the mini-batch: gradients already allocated
    forward_only: bool = False  # log-prob pass: no_grad
    keep_optimizer: bool = False  # a log-prob pass with the optimizer states on the card (no optimizer_offload)
    model_dtype: str = "fp32"
    param_dtype: str = "bf16"
    reduce_dtype: str = "fp32"
    gradient_checkpointing: bool = False
    calculate_entropy: bool = False
    entropy_chunk: int = 0  # 0: verl's unchunked entropy_from_logits
    entropy_checkpointing: bool = False
    forward_prefetch: bool = False
    reshard_after_forward: bool = True
    temperature: float = 1.0
    loss_mode: str = "vanilla"
    loss_agg_mode: str = "token-mean"
    use_kl_loss: bool = False
    kl_loss_type: str = "low_var_kl"
    foreach: bool = False  # AdamW's multi-tensor path (torch's default on an accelerator, not on a CPU)
    fused_cross_entropy: bool = False  # log-probs through torch_npu's fused cross-entropy (trainer.device=npu)
    optimizer_impl: str = "torch.optim"
    optimizer: str = "AdamW"

    def hf_config(self):
        from transformers import AutoConfig

        data = json.loads(self.architecture)
        data.pop("transformers_version", None)
        model_type = data.pop("model_type")
        config = AutoConfig.for_model(model_type, **data)
        config._attn_implementation = ATTENTION
        config.use_cache = False
        return config


def _ulysses_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """sdpa inside verl's Ulysses all-to-all (query/key/value: [batch, heads, seq, dim])."""
    from transformers.models.llama.modeling_llama import repeat_kv

    from verl.utils.ulysses import (
        gather_heads_scatter_seq,
        gather_seq_scatter_heads,
        get_ulysses_sequence_parallel_world_size,
    )

    sp = get_ulysses_sequence_parallel_world_size()
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # [batch, seq, heads, dim]
    if sp > 1:
        repeats = max(sp // k.size(2), 1)
        k, v = (repeat_kv(t.transpose(1, 2), repeats).transpose(1, 2) for t in (k, v))
        q, k, v = (gather_seq_scatter_heads(t, seq_dim=1, head_dim=2) for t in (q, k, v))
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [batch, heads, seq, dim]
    if q.size(1) != k.size(1):  # as transformers' sdpa_attention_forward: repeat, so the O(seq) kernel runs
        k, v = repeat_kv(k, q.size(1) // k.size(1)), repeat_kv(v, q.size(1) // v.size(1))
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attention_mask, is_causal=attention_mask is None, scale=scaling
    ).transpose(1, 2)
    if sp > 1:
        out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
    return out.contiguous(), None


def register_attention() -> None:
    """Seam: one entry in transformers' public attention registry (``AttentionInterface.register``)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _ulysses_sdpa)


@dataclass
class Parts:
    module: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    sp_group: object


def meshes(shape: StepShape, device: str = "cpu"):
    """The FSDP mesh over every rank and the Ulysses group, as the engine's _init_device_mesh makes them.

    Made before any fake-tensor mode is entered: a device mesh reads its rank table's values."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device, (shape.world_size,), mesh_dim_names=("fsdp",))
    sp_group = None
    if shape.sp > 1:
        sp_mesh = init_device_mesh(device, (shape.world_size // shape.sp, shape.sp), mesh_dim_names=("dp", "sp"))
        sp_group = sp_mesh["sp"].get_group()
    return mesh, sp_group


def build(shape: StepShape, mesh, sp_group) -> Parts:
    """The sharded model (and optimizer with its states) as verl's FSDP2 engine builds them."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import AutoModelForCausalLM

    from verl.utils.fsdp_utils import apply_fsdp2
    from verl.utils.ulysses import set_ulysses_sequence_parallel_group

    register_attention()
    torch.manual_seed(0)
    config = shape.hf_config()
    module = AutoModelForCausalLM.from_config(config, dtype=_DTYPES[shape.model_dtype])
    if any(p.dtype != _DTYPES[shape.model_dtype] for p in module.parameters()):
        module.to(_DTYPES[shape.model_dtype])  # as the engine does ("some parameters may not be in torch_dtype")
    if shape.gradient_checkpointing and not shape.forward_only:
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = MixedPrecisionPolicy(
        param_dtype=_DTYPES[shape.param_dtype], reduce_dtype=_DTYPES[shape.reduce_dtype], cast_forward_inputs=True
    )
    fsdp_kwargs = {"mesh": mesh, "mp_policy": policy, "offload_policy": None,
                   "reshard_after_forward": shape.reshard_after_forward}
    apply_fsdp2(module, fsdp_kwargs, {"wrap_policy": {}, "forward_prefetch": shape.forward_prefetch})
    set_ulysses_sequence_parallel_group(sp_group)
    optimizer = _optimizer(module, shape) if (not shape.forward_only or shape.keep_optimizer) else None
    return Parts(module=module, optimizer=optimizer, sp_group=sp_group)


def _optimizer(module: torch.nn.Module, shape: StepShape) -> torch.optim.Optimizer:
    """verl's build_optimizer, then its states made once (a later step's state: the first step makes them)."""
    from verl.workers.config.optimizer import build_optimizer

    config = SimpleNamespace(lr=1e-6, weight_decay=0.01, betas=(0.9, 0.999), optimizer=shape.optimizer,
                             optimizer_impl=shape.optimizer_impl, override_optimizer_config={"foreach": shape.foreach})
    optimizer = build_optimizer(module.parameters(), config)
    for param in module.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _batch(shape: StepShape, device: str):
    """One packed micro-batch: token ids and positions restarting at every sequence."""
    vocab = json.loads(shape.architecture)["vocab_size"]
    generator = torch.Generator().manual_seed(0)
    if shape.remove_padding:
        input_ids = torch.randint(0, vocab, (1, shape.tokens), generator=generator).to(device)
        position_ids = (torch.arange(shape.tokens) % shape.seq_len).unsqueeze(0).to(device)
    else:
        rows = max(shape.tokens // shape.seq_len, 1)
        input_ids = torch.randint(0, vocab, (rows, shape.seq_len), generator=generator).to(device)
        position_ids = torch.arange(shape.seq_len).expand(rows, -1).to(device)
    return input_ids, position_ids


def _head(shape: StepShape, logits: torch.Tensor, labels: torch.Tensor):
    """What the engine's prepare_model_outputs does with the logits: temperature, entropy, log-probs."""
    from verl.utils import torch_functional as verl_F
    from verl.utils.torch_functional import logprobs_from_logits

    if shape.temperature != 1.0:
        logits = logits / torch.tensor(shape.temperature).to(logits.dtype)
    entropy = None
    if shape.calculate_entropy:
        if shape.entropy_chunk and shape.remove_padding:
            fn = lambda x: verl_F.entropy_from_logits_with_chunking(x, chunk_size=shape.entropy_chunk)  # noqa: E731
        else:
            fn = verl_F.entropy_from_logits
        entropy = torch.utils.checkpoint.checkpoint(fn, logits, use_reentrant=False) if (
            shape.entropy_checkpointing) else fn(logits)
    if shape.fused_cross_entropy:
        return _npu_cross_entropy_log_probs(logits, labels), entropy
    log_probs = logprobs_from_logits(logits=logits, labels=labels, inplace_backward=not shape.calculate_entropy)
    return log_probs, entropy


class _FusedCrossEntropy(torch.autograd.Function):
    """The memory of ``torch_npu.npu_cross_entropy_loss(input, target, reduction="none")``, on any device.

    Why: on an NPU verl's ``logprobs_from_logits`` takes this fused op (``logprobs_from_logits_torch_npu``)
    instead of the CPU's row-by-row ``logprobs_from_logits_v2``. Its documented outputs are the per-row
    loss and ``log_prob`` ([N, C], the input's dtype), kept for the backward, which writes one [N, C]
    gradient. This function allocates exactly that: one vocabulary-wide tensor forward, one backward.
    It is also one op where the row loop is one per token (8192 per card at 65536 tokens, minutes traced)."""

    @staticmethod
    def forward(ctx, logits, labels):
        log_prob = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(log_prob, labels)
        return log_prob.gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        log_prob, labels = ctx.saved_tensors
        grad_input = log_prob.exp().neg_()  # d log p(label) / d logits = onehot - softmax, in one buffer
        grad_input.scatter_add_(-1, labels.unsqueeze(-1), torch.ones_like(grad_input[..., :1]))
        return grad_input.mul_(grad.unsqueeze(-1)), None


def _npu_cross_entropy_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """verl's ``logprobs_from_logits_torch_npu``: rows flattened, the fused op, the result reshaped."""
    rows = logits.shape[:-1]
    return _FusedCrossEntropy.apply(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)).view(*rows)


def forward_micro_batch(shape: StepShape, parts: Parts, device: str = "cpu"):
    """The engine's forward_step on the padding-free path (or the padded one), returning (loss, log_probs)."""
    from verl.utils.ulysses import gather_outputs_and_unpad, ulysses_pad_and_slice_inputs

    input_ids, position_ids = _batch(shape, device)
    pad = 0
    if shape.remove_padding:
        rolled = torch.roll(input_ids, shifts=-1, dims=1)
        if shape.sp > 1:
            input_ids, position_ids, pad = ulysses_pad_and_slice_inputs(input_ids, position_ids, sp_size=shape.sp)
            rolled, _, _ = ulysses_pad_and_slice_inputs(rolled, None, sp_size=shape.sp)
        labels = rolled.squeeze(0)
    else:
        labels = torch.roll(input_ids.reshape(-1), shifts=-1, dims=0)
    dtype = _DTYPES[shape.param_dtype]
    autocast = contextlib.nullcontext() if dtype == torch.float32 else torch.autocast(device, dtype=dtype)
    with autocast:
        output = parts.module(input_ids=input_ids, attention_mask=None, position_ids=position_ids, use_cache=False)
        if shape.remove_padding:
            log_probs, entropy = _head(shape, output.logits.squeeze(0), labels)
            if shape.sp > 1:
                log_probs = gather_outputs_and_unpad(log_probs, gather_dim=0, unpad_dim=0, padding_size=pad)
                if entropy is not None:
                    entropy = gather_outputs_and_unpad(entropy, gather_dim=0, unpad_dim=0, padding_size=pad)
        else:
            logits = output.logits
            entropy = None
            if shape.calculate_entropy:  # the padded path: verl's unchunked entropy over [rows, seq, vocab]
                from verl.utils import torch_functional as verl_F

                entropy = verl_F.entropy_from_logits(logits)
            logits = torch.cat(list(logits.unbind()))  # the engine's narrow + cat: a copy
            log_probs, _ = _head(dataclasses.replace(shape, calculate_entropy=False), logits, labels)
        if shape.forward_only:
            return None, log_probs
        return _loss(shape, log_probs, entropy), log_probs


def _responses(shape: StepShape, per_token: torch.Tensor) -> torch.Tensor:
    """Per-token values of the packed row -> [sequences, response_len] (verl's no_padding_2_padding)."""
    sequences = per_token.numel() // shape.seq_len
    prompt = shape.seq_len - shape.response_len
    rows = per_token.reshape(-1)[: sequences * shape.seq_len].view(sequences, shape.seq_len)
    return rows[:, max(prompt - 1, 0): max(prompt - 1, 0) + shape.response_len]


def _loss(shape: StepShape, log_probs: torch.Tensor, entropy: torch.Tensor | None) -> torch.Tensor:
    """verl's policy loss (+ entropy and KL terms as ppo_loss adds them) on the response tokens."""
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=shape.loss_agg_mode,
                         clip_ratio_low=0.2, clip_ratio_high=0.28)
    log_prob = _responses(shape, log_probs)
    mask = torch.ones_like(log_prob, dtype=torch.bool)
    old = log_prob.detach().clone()
    advantages = torch.ones_like(log_prob)
    loss, _ = get_policy_loss_fn(shape.loss_mode)(
        old_log_prob=old, log_prob=log_prob, advantages=advantages, response_mask=mask,
        loss_agg_mode=shape.loss_agg_mode, config=config, rollout_is_weights=None,
    )
    if entropy is not None:
        loss = loss - 0.0 * agg_loss(loss_mat=_responses(shape, entropy), loss_mask=mask,
                                     loss_agg_mode=shape.loss_agg_mode)
    if shape.use_kl_loss:
        kld = kl_penalty(logprob=log_prob, ref_logprob=old, kl_penalty=shape.kl_loss_type)
        loss = loss + 0.001 * agg_loss(loss_mat=kld, loss_mask=mask, loss_agg_mode=shape.loss_agg_mode)
    return loss


def _clip_like_fsdp1(module: torch.nn.Module, max_norm: float) -> None:
    """FSDP1's clip_grad_norm_ on its flat shards: local sum of squares, one all-reduce, scale in place.

    Why not verl's fsdp2_clip_grad_norm_ for ``strategy: fsdp``: the engine calls FSDP1's own method there,
    which never gathers a gradient, while the DTensor path of torch 2.13 does (measured here: the bump is
    the whole unsharded gradient)."""
    import torch.distributed as dist

    grads = [p.grad._local_tensor if hasattr(p.grad, "_local_tensor") else p.grad
             for p in module.parameters() if p.grad is not None]
    total = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
    dist.all_reduce(total)
    coef = (max_norm / (total.sqrt() + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(coef.to(grad.dtype))


def prepare_phase(shape: StepShape, parts: Parts) -> None:
    """The state the card is in when the phase's largest micro-batch starts (before any measurement).

    The engine's contexts: ``module.train()`` for the update (gradient checkpointing acts only in training
    mode), ``module.eval()`` for a log-prob pass. A later micro-batch of a mini-batch starts with the
    earlier ones' sharded gradients allocated; its peak is the mini-batch's peak, so that one is run."""
    if shape.forward_only:
        parts.module.eval()
        return
    parts.module.train()
    parts.optimizer.zero_grad(set_to_none=True)
    if shape.accumulating:
        for param in parts.module.parameters():
            param.grad = torch.zeros_like(param)


def run_phase(shape: StepShape, parts: Parts, device: str = "cpu") -> None:
    """The largest micro-batch and, for the update, the optimizer step after it (clip, AdamW)."""
    from verl.utils.fsdp_utils import fsdp2_clip_grad_norm_

    if shape.forward_only:
        with torch.no_grad():
            forward_micro_batch(shape, parts, device)
        parts.module.reshard()
        return
    loss, _ = forward_micro_batch(shape, parts, device)
    loss.backward()
    del loss
    if shape.strategy == "fsdp2":
        fsdp2_clip_grad_norm_(parts.module.parameters(), max_norm=1.0)
    else:
        _clip_like_fsdp1(parts.module, max_norm=1.0)
    parts.optimizer.step()
