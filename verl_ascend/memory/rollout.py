"""The rollout engine's memory per card, by vLLM's own accounting (the pinned vLLM 0.27.1, vllm-ascend v0.23.0).

Why vLLM's rules and not a formula of ours: what a rollout can hold at once is what vLLM computes at
start, so the plan follows the same steps:

1. KV bytes per token per layer per card: ``FullAttentionSpec.real_page_size_bytes`` / block size =
   2 (K and V) x KV heads on the card x head size x dtype size (vllm/v1/kv_cache_interface.py); the
   KV heads are split by tensor parallelism and replicated when TP exceeds them (Qwen2Attention:
   ``max(1, num_kv_heads // tp)``);
2. the KV budget: on an accelerator ``gpu_memory_utilization`` x the card - weights - the profiling
   pass's peak - non-torch memory (vllm/v1/worker/gpu_worker.py and vllm-ascend's worker.py
   ``determine_available_memory``); on vLLM's CPU build the device fixes it (``VLLM_CPU_KVCACHE_SPACE``);
3. blocks: budget // page size // layers (vllm/v1/core/kv_cache_utils.py ``get_num_blocks``);
4. concurrency: blocks // blocks per sequence, capped by ``max_num_seqs``
   (``get_max_concurrency_for_kv_cache_config``).

The profiling pass's activation peak (``profile_run`` at ``max_num_batched_tokens``, then the sampler
over ``min(max_num_seqs, max_num_batched_tokens)`` rows of logits) is the one estimated term: its figure
is the largest live set of that forward pass; vllm-ascend logs the measured one ("peak activation"), which
the first host run compares (docs/ascend_tutorial/memory.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from verl_ascend.memory.devices import DeviceMemory
from verl_ascend.memory.terms import PlanInputError, Term

R = "actor_rollout_ref.rollout."
TP = R + "tensor_model_parallel_size"
UTIL = R + "gpu_memory_utilization"
TOKENS = R + "max_num_batched_tokens"
SEQS = R + "max_num_seqs"
DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4,
               "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "auto": None}
VLLM = "vLLM 0.27.1"


@dataclass(frozen=True)
class Rollout:
    """The engine on one card: its terms, and what they mean for the sequences held at once."""

    weights: Term
    activation: Term
    comm: Term
    kv_cache: Term
    kv_bytes_per_token: int  # per card, all layers
    block_size: int
    num_blocks: int
    seqs_mean: int  # sequences one replica holds at once at the mean response length
    seqs_max: int  # ... at the maximum response length
    mean_len: int
    max_len: int
    replicas: int
    requested: int  # gpu_memory_utilization x card (0 where the device fixes the KV cache)
    engine: str  # "vllm" or another rollout name (no paged KV cache accounted)
    tp: int = 1

    @property
    def terms(self) -> tuple[Term, ...]:
        return (self.weights, self.activation, self.comm, self.kv_cache)

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def reported_tokens(self, max_model_len: int) -> int:
        """The figure vLLM logs as "GPU KV cache size: N tokens": its maximum concurrency at
        ``max_model_len`` (blocks / blocks per request) times ``max_model_len`` (kv_cache_utils.py
        ``get_kv_cache_capacity``), which differs from blocks x block size by the last block's rounding."""
        return int(self.num_blocks / math.ceil(max_model_len / self.block_size) * max_model_len)


def _sel(config: Any, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(config, key, default=default)
    return default if value is None else value


def _vllm_kwarg(config: Any, name: str) -> Any:
    return OmegaConf.select(config, R + "engine_kwargs.vllm." + name, default=None)


def block_size(config: Any, card: DeviceMemory) -> tuple[int, str]:
    """vLLM's KV block size in tokens and whose it is: the user's ``engine_kwargs.vllm.block_size``, else the
    device's default (it decides how many sequences the blocks hold)."""
    key = R + "engine_kwargs.vllm.block_size"
    value = _vllm_kwarg(config, "block_size")
    if value is None:
        return card.kv_block_size, card.kv_block_source
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if size <= 0 or isinstance(value, bool) or str(size) != str(value).strip():
        raise PlanInputError(f"{key}={value!r}: vLLM's block size is a positive whole number of tokens (e.g. 128)")
    return size, key


def dtype_bytes(config: Any, arch: Any) -> int:
    """Bytes per weight in the engine: ``rollout.dtype`` (upstream's default bfloat16)."""
    name = str(_sel(config, R + "dtype", "bfloat16")).replace("torch.", "")
    size = DTYPE_BYTES.get(name)
    return size or 2


def kv_dtype_bytes(config: Any, arch: Any) -> int:
    """``kv_cache_dtype`` (engine_kwargs.vllm), ``auto`` = the model's dtype in the engine."""
    name = str(_vllm_kwarg(config, "kv_cache_dtype") or "auto")
    return DTYPE_BYTES.get(name) or dtype_bytes(config, arch)


def head_dim(arch: Any) -> int:
    return int(getattr(arch, "head_dim", None) or arch.hidden_size // arch.num_attention_heads)


def kv_heads_per_card(arch: Any, tp: int) -> int:
    kv = int(getattr(arch, "num_key_value_heads", None) or arch.num_attention_heads)
    return max(1, kv // tp)  # replicated when TP exceeds the KV heads (vLLM's Qwen2/Llama attention)


def kv_bytes_per_token(config: Any, arch: Any, tp: int) -> int:
    """All layers' K and V of one token on one card (vLLM's page size / block size, times the layers)."""
    return 2 * int(arch.num_hidden_layers) * kv_heads_per_card(arch, tp) * head_dim(arch) * kv_dtype_bytes(config, arch)


def weights_per_card(config: Any, arch: Any, tp: int) -> int:
    """The engine's weights on one card at TP: vLLM's parallel layers split each weight by its kind
    (vocabulary rows padded to 64 then split; q/o/MLP split; K/V heads split or replicated; norms whole).
    The shapes come from the architecture's own transformers class, built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(arch)
    except (ValueError, KeyError) as exc:
        from verl_ascend.memory.terms import PlanInputError

        raise PlanInputError(f"actor_rollout_ref.model.path: transformers cannot build the architecture its "
                             f"config.json names ({type(exc).__name__}: {str(exc)[:200]}); accepted: a causal LM "
                             "transformers knows") from None
    kv_split = int(getattr(arch, "num_key_value_heads", arch.num_attention_heads)) // kv_heads_per_card(arch, tp)
    total = 0
    for name, p in model.named_parameters():
        n = p.numel()
        if "embed_tokens" in name or "lm_head" in name:
            rows = math.ceil(math.ceil(p.shape[0] / 64) * 64 / tp)
            n = rows * p.shape[1]
        elif any(k in name for k in ("k_proj", "v_proj")):
            n = math.ceil(n / kv_split)
        elif any(k in name for k in ("q_proj", "o_proj", "gate_proj", "up_proj", "down_proj")):
            n = math.ceil(n / tp)
        total += n
    return total * dtype_bytes(config, arch)


def profile_activation(config: Any, arch: Any, tp: int) -> int:
    """The profiling pass's peak: the largest live set of one layer's forward over ``max_num_batched_tokens``
    (residual + hidden, the fused QKV output, the fused gate/up output and its activation) plus the
    sampler's fp32 logits over ``min(max_num_seqs, max_num_batched_tokens)`` rows (logits, probabilities
    and the sorted copy of top-p)."""
    tokens = int(_sel(config, TOKENS, 8192))
    rows = min(int(_sel(config, SEQS, 256)), tokens)
    h, inter, d = int(arch.hidden_size), int(getattr(arch, "intermediate_size", 4 * arch.hidden_size)), head_dim(arch)
    qkv = (arch.num_attention_heads // tp if arch.num_attention_heads >= tp else 1) * d + 2 * kv_heads_per_card(arch, tp) * d
    forward = tokens * (2 * h + qkv + 3 * math.ceil(inter / tp)) * dtype_bytes(config, arch)
    return forward + 3 * rows * int(arch.vocab_size) * 4


def engine_communicators(tp: int) -> int:
    """Device communicators of one engine process: vLLM's world and TP groups, each only when larger than 1."""
    return 2 if tp > 1 else 0


def lengths(config: Any) -> tuple[int, int]:
    """(mean, max) tokens of one sequence: the prompt budget plus the mean / maximum response."""
    from verl_ascend.memory.options import MemoryOptions

    prompt = int(_sel(config, "data.max_prompt_length", 512))
    response = int(_sel(config, "data.max_response_length", 512))
    mean = MemoryOptions.from_config(config).mean_response_length
    mean = int(mean) if mean is not None else response // 2
    return prompt + min(mean, response), prompt + response


def plan_rollout(config: Any, arch: Any, card: DeviceMemory) -> Rollout:
    """The rollout engine on one card of ``card``. vLLM asks for ``gpu_memory_utilization`` of the whole
    card whatever else holds part of it, so what other states keep there comes on top (the residency)."""
    tp = int(_sel(config, TP, 1))
    engine = str(_sel(config, R + "name", "vllm"))
    weights = weights_per_card(config, arch, tp)
    act = profile_activation(config, arch, tp) if engine == "vllm" else 0
    comm = engine_communicators(tp) * card.comm_buffer_bytes
    block, block_from = block_size(config, card)
    per_token = kv_bytes_per_token(config, arch, tp)
    util = float(_sel(config, UTIL, 0.5))
    requested = 0
    if engine != "vllm":
        kv, kv_source, kv_keys = 0, f"rollout.name={engine}: no paged KV cache (tensors of the running batch only)", ()
    elif card.kv_cache_bytes is not None:
        kv, kv_source, kv_keys = card.kv_cache_bytes, card.kv_cache_source, card.kv_cache_keys
    else:
        requested = math.ceil(card.bytes * util)
        kv = max(0, requested - weights - act - comm)
        kv_source = (f"{VLLM} determine_available_memory: {util} x card - weights - profiling peak - non-torch "
                     "(vllm/v1/worker/gpu_worker.py; vllm-ascend v0.23.0 worker.py)")
        kv_keys = (UTIL, TP, TOKENS)
    if engine == "vllm":
        kv_source += f"; blocks of {block} tokens ({block_from})"
    page = block * per_token // int(arch.num_hidden_layers)  # one layer's block, vLLM's page_size_bytes
    blocks = kv // page // int(arch.num_hidden_layers) if page else 0  # get_num_blocks
    kv = blocks * page * int(arch.num_hidden_layers) if engine == "vllm" else 0  # what is allocated
    mean_len, max_len = lengths(config)
    seqs_cap = int(_sel(config, SEQS, 256))
    held = lambda n: min(seqs_cap, blocks // math.ceil(n / block)) if blocks else 0  # noqa: E731
    cards = int(_sel(config, R + "nnodes", 0) or 0) * int(_sel(config, R + "n_gpus_per_node", 0) or 0)
    from verl_ascend import trainer_mode

    if not cards or trainer_mode.mode_of(config) != trainer_mode.SEPARATE:
        cards = int(_sel(config, "trainer.nnodes", 1)) * int(_sel(config, "trainer.n_gpus_per_node", 1))
    src = f"{VLLM} vllm/model_executor/layers (vocab padded to 64, TP-split linear layers) over the model's shapes"
    return Rollout(
        weights=Term("engine weights", weights, src, (TP, R + "dtype")),
        activation=Term("engine profiling peak", act, f"estimate of {VLLM} profile_run at max_num_batched_tokens "
                        "and the sampler over max_num_seqs rows", (TOKENS, SEQS)),
        comm=Term("engine HCCL buffers", comm, f"{engine_communicators(tp)} communicators (vLLM world, TP) x "
                  f"{card.comm_source}", (TP,)),
        kv_cache=Term("KV cache", kv, kv_source, kv_keys),
        kv_bytes_per_token=per_token, block_size=block, num_blocks=blocks, seqs_mean=held(mean_len),
        seqs_max=held(max_len), mean_len=mean_len, max_len=max_len, replicas=max(1, cards // tp),
        requested=requested, engine=engine, tp=tp)
