"""The training half of the memory plan: one step's phases on a trainer card, from a composed config.

``plan_training`` reads the config the way verl 0.9.1's FSDP engine and V1 trainer do and traces, under
fake tensors, the program of :mod:`verl_ascend.memory.train_step` (the model class of the checkpoint's
``config.json``, FSDP2 sharding, verl's micro-batch path) for each phase a step runs on the card:

- ``actor update``: always. One optimizer step: the largest micro-batch forward and backward (two when a
  mini-batch holds more than one, so the second runs with the first's gradients allocated), gradient
  clipping, AdamW. The engine's train context loads parameters, gradients and optimizer states on the
  card whatever the offload switches say, and frees the gradients when it exits.
- ``old log-prob``: unless ``algorithm.rollout_correction.bypass_mode`` (then upstream reuses the rollout's
  log-probs). A no-grad pass of the largest log-prob micro-batch, with entropy (upstream asks for it). The
  eval context loads the parameters only: optimizer states stay on the host with ``optimizer_offload``.
- ``ref log-prob``: when ``actor.use_kl_loss`` or ``algorithm.use_kl_in_reward`` (upstream's
  ``need_reference_policy``). The reference engine is forward-only: FSDP2 with ``CPUOffloadPolicy``, so its
  shards live on the host and each layer is gathered onto the card as it runs.

Every term says which keys change it. The micro-batch: ``ppo_max_token_len_per_gpu`` x Ulysses size tokens
per SP group with ``use_dynamic_bsz`` (at least one whole prompt + response: a longer sequence gets a
micro-batch of its own), else ``ppo_micro_batch_size_per_gpu`` sequences of ``max_prompt_length +
max_response_length`` tokens (the padded worst case).

Modelled with limits, said plainly:
- ``strategy: fsdp`` (FSDP1) is traced as FSDP2: both shard per decoder layer (verl's wrap policy) and
  gather one layer at a time; FSDP1's flat parameter rounds shard sizes up to the world size (bytes).
  Its gradient clipping is FSDP1's (local norms, one all-reduce); with ``fsdp2`` it is verl's
  ``fsdp2_clip_grad_norm_``, which on torch 2.13 gathers every gradient whole for the norm (a transient
  the size of the unsharded fp32 gradients: measured on the CPU runs, and planned).
- ``trainer.device=npu``: the fused RMSNorm/SwiGLU/rotary replacements of the Ascend backend are not
  traced (the toolkit cannot import them); they save fewer intermediates than transformers' eager
  modules, so the activation term is an upper bound there. Autocast follows the CPU's op lists; AdamW
  runs its multi-tensor path (``foreach``), as torch picks on an accelerator. HCCL's communicator
  buffers are a residency term of their own (not here).
- Attention is sdpa (O(tokens) memory like flash-attention); the fused kernel's softmax statistics are
  not modelled. On an NPU verl's ``logprobs_from_logits`` calls torch_npu's fused cross-entropy instead of
  the row-by-row log-softmax it runs on a CPU; with ``trainer.device=npu`` the trace runs a stand-in with
  the fused op's documented outputs (``train_step._FusedCrossEntropy``), elsewhere verl's own function.
- ``fsdp_config.use_no_sync_for_gradient_accumulation`` (off in verl's fsdp.yaml) is not modelled: with it
  on, unsharded gradients would stay between micro-batches.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verl_ascend.memory.terms import Phase, PlanInputError, Term

MODEL_PATH = "actor_rollout_ref.model.path"
SHIPPED = Path(__file__).with_name("architectures")
SOURCE = "fake-tensor trace (FSDPMemTracker): verl_ascend/memory/train_step.py"

A = "actor_rollout_ref.actor"
FSDP = f"{A}.fsdp_config"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
M = "actor_rollout_ref.model"


# ------------------------------------------------------------------ the architecture
def shipped_architectures() -> list[str]:
    """The model names whose config.json ships with verl-ascend (for a path with no local folder)."""
    return sorted(p.stem for p in SHIPPED.glob("*.json"))


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PlanInputError(f"{MODEL_PATH}: {path} is not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise PlanInputError(f"{MODEL_PATH}: {path} holds {type(data).__name__}, not a JSON object")
    return data


def architecture_file(model_path: str) -> Path:
    """The config.json the plan reads for ``model_path``: the local folder's, else the shipped one by name."""
    folder = Path(os.path.expanduser(str(model_path)))
    if folder.is_dir():
        path = folder / "config.json"
        if not path.is_file():
            raise PlanInputError(f"{MODEL_PATH}={model_path}: the folder {folder} has no config.json "
                                 "(a Hugging Face checkpoint folder holds one)")
        return path
    name = folder.name
    shipped = SHIPPED / f"{name}.json"
    if not name or not shipped.is_file():
        raise PlanInputError(
            f"{MODEL_PATH}={model_path}: no such folder, and no architecture shipped under the name {name!r}; "
            f"give a local checkpoint folder with a config.json, or one of: {', '.join(shipped_architectures())}")
    return shipped


def load_architecture(config: Any):
    """The transformers config of ``actor_rollout_ref.model.path`` (``PlanInputError`` naming key and file)."""
    from transformers import CONFIG_MAPPING

    model_path = _get(config, MODEL_PATH)
    if model_path in (None, ""):
        raise PlanInputError(f"{MODEL_PATH} is not set: a checkpoint folder or a shipped model name is needed")
    path = architecture_file(str(model_path))
    data = _read_json(path)
    model_type = data.get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise PlanInputError(f"{path}: model_type {model_type!r} is not an architecture transformers knows "
                             f"({MODEL_PATH}={model_path})")
    architectures = data.get("architectures") or []
    causal = [name for name in architectures if _causal_lm_class(name) is not None]
    if not causal:
        raise PlanInputError(f"{path}: architectures {architectures!r} names no causal-LM class transformers has "
                             f"(e.g. Qwen2ForCausalLM; {MODEL_PATH}={model_path})")
    hf = CONFIG_MAPPING[model_type].from_dict({k: v for k, v in data.items() if k != "model_type"})
    hf.architectures = causal
    return hf


def _causal_lm_class(name: str):
    import transformers

    if not isinstance(name, str) or not name.endswith("ForCausalLM"):
        return None
    try:
        return getattr(transformers, name)
    except (AttributeError, ImportError):
        return None


def _architecture_json(hf) -> str:
    data = hf.to_dict()
    keep = {k: v for k, v in data.items() if not k.startswith("_") and k not in ("transformers_version",)}
    keep["architectures"] = list(hf.architectures)
    return json.dumps(keep, sort_keys=True, default=str)


# ------------------------------------------------------------------ reading the config
_ABSENT = object()


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(config, DictConfig):
        value = OmegaConf.select(config, dotted, default=_ABSENT, throw_on_resolution_failure=False)
    else:
        value = config
        for part in dotted.split("."):
            value = value.get(part, _ABSENT) if isinstance(value, Mapping) else _ABSENT
    return default if value is _ABSENT or value is None else value


def _with_overrides(config: Any, overrides: Mapping[str, object] | None):
    if not overrides:
        return config
    from omegaconf import DictConfig, OmegaConf

    copy = config.copy() if isinstance(config, DictConfig) else OmegaConf.create(dict(config))
    for key, value in overrides.items():
        OmegaConf.update(copy, key, value, force_add=True)
    return copy


def _int(config: Any, key: str, default: int | None = None) -> int:
    value = _get(config, key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PlanInputError(f"{key}={value!r}: a whole number is needed") from None
    if number <= 0 and default is not None and number != -1:
        raise PlanInputError(f"{key}={value!r}: must be positive")
    return number


def _bool(config: Any, key: str, default: bool = False) -> bool:
    value = _get(config, key, default)
    if isinstance(value, str):
        from verl_ascend.envs import parse_bool

        return parse_bool(key, value)
    return bool(value)


def _dtype(config: Any, key: str, default: str) -> str:
    value = str(_get(config, key, default)).lower()
    aliases = {"float32": "fp32", "fp32": "fp32", "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16",
               "fp16": "fp16", "32": "fp32", "16": "fp16"}
    if value not in aliases:
        raise PlanInputError(f"{key}={value!r}: one of fp32, bf16, fp16")
    return aliases[value]


def _cards(config: Any) -> tuple[int, int]:
    """(trainer ranks, cards per node)."""
    per_node = _int(config, "trainer.n_gpus_per_node", 1)
    return _int(config, "trainer.nnodes", 1) * per_node, per_node


def _shard_size(config: Any, world: int) -> int:
    fsdp_size = _int(config, f"{FSDP}.fsdp_size", -1)
    return world if fsdp_size <= 0 or fsdp_size >= world else fsdp_size


def _budget(config: Any, sp: int, *, dynamic_key: str, tokens_key: str, rows_key: str) -> tuple[int, tuple[str, ...]]:
    """Tokens of the largest micro-batch of one SP group, and the keys that set it."""
    seq_len = _int(config, "data.max_prompt_length", 1) + _int(config, "data.max_response_length", 1)
    if _bool(config, dynamic_key):
        per_gpu = _int(config, tokens_key, 1)
        return max(per_gpu * sp, seq_len), (dynamic_key, tokens_key, "data.max_response_length")
    rows = _int(config, rows_key, 1)
    return rows * seq_len, (dynamic_key, rows_key, "data.max_prompt_length", "data.max_response_length")


def _shape_kwargs(config: Any, hf) -> dict:
    world, _ = _cards(config)
    shard = _shard_size(config, world)
    sp = _int(config, f"{A}.ulysses_sequence_parallel_size", 1)
    if shard % sp:
        raise PlanInputError(f"{A}.ulysses_sequence_parallel_size={sp} does not divide the FSDP size {shard} "
                             f"(trainer.nnodes x trainer.n_gpus_per_node, or {FSDP}.fsdp_size)")
    heads = getattr(hf, "num_attention_heads", sp)
    if heads % sp:
        raise PlanInputError(f"{A}.ulysses_sequence_parallel_size={sp} does not divide the model's "
                             f"{heads} attention heads ({MODEL_PATH})")
    device = str(_get(config, "trainer.device", "cuda"))
    return dict(
        architecture=_architecture_json(hf), world_size=shard, sp=sp,
        strategy="fsdp" if str(_get(config, f"{A}.strategy", "fsdp2")) == "fsdp" else "fsdp2",
        seq_len=_int(config, "data.max_prompt_length", 1) + _int(config, "data.max_response_length", 1),
        response_len=_int(config, "data.max_response_length", 1),
        remove_padding=_bool(config, f"{M}.use_remove_padding", True) or sp > 1,
        model_dtype=_dtype(config, f"{FSDP}.model_dtype", "fp32"),
        param_dtype=_dtype(config, f"{FSDP}.mixed_precision.param_dtype", "bf16"),
        reduce_dtype=_dtype(config, f"{FSDP}.mixed_precision.reduce_dtype", "fp32"),
        gradient_checkpointing=_bool(config, f"{M}.enable_gradient_checkpointing"),
        entropy_chunk=(_int(config, f"{FSDP}.entropy_from_logits_chunk_size", 2048)
                       if _bool(config, f"{FSDP}.entropy_from_logits_with_chunking") else 0),
        entropy_checkpointing=_bool(config, f"{FSDP}.entropy_checkpointing"),
        forward_prefetch=_bool(config, f"{FSDP}.forward_prefetch"),
        reshard_after_forward=_bool(config, f"{FSDP}.reshard_after_forward", True),
        temperature=float(_get(config, f"{R}.temperature", 1.0)),
        loss_mode=str(_get(config, f"{A}.policy_loss.loss_mode", "vanilla")),
        loss_agg_mode=str(_get(config, f"{A}.loss_agg_mode", "token-mean")),
        use_kl_loss=_bool(config, f"{A}.use_kl_loss"),
        kl_loss_type=str(_get(config, f"{A}.kl_loss_type", "low_var_kl")),
        foreach=device != "cpu",
        fused_cross_entropy=device == "npu",
        optimizer_impl=str(_get(config, f"{A}.optim.optimizer_impl", "torch.optim")),
        optimizer=str(_get(config, f"{A}.optim.optimizer", "AdamW")),
    )


# ------------------------------------------------------------------ the phases
def _update_shape(config: Any, base: dict):
    from verl_ascend.memory.train_step import StepShape

    tokens, keys = _budget(config, base["sp"], dynamic_key=f"{A}.use_dynamic_bsz",
                           tokens_key=f"{A}.ppo_max_token_len_per_gpu", rows_key=f"{A}.ppo_micro_batch_size_per_gpu")
    dp = base["world_size"] // base["sp"]
    mini = _int(config, f"{A}.ppo_mini_batch_size", 1) * _int(config, f"{R}.n", 1)
    sequences_per_group = max(math.ceil(mini / dp), 1)
    accumulating = sequences_per_group * base["seq_len"] > tokens
    entropy = _bool(config, f"{A}.calculate_entropy") or float(_get(config, f"{A}.entropy_coeff", 0.0)) != 0.0
    return StepShape(**base, tokens=tokens, accumulating=accumulating, calculate_entropy=entropy), keys


def _log_prob_shape(config: Any, base: dict, owner: str, *, entropy: bool, model_dtype: str | None = None):
    from verl_ascend.memory.train_step import StepShape

    tokens, keys = _budget(config, base["sp"], dynamic_key=f"{owner}.log_prob_use_dynamic_bsz",
                           tokens_key=f"{owner}.log_prob_max_token_len_per_gpu",
                           rows_key=f"{owner}.log_prob_micro_batch_size_per_gpu")
    fields = dict(base, tokens=tokens, forward_only=True, calculate_entropy=entropy)
    if model_dtype:
        fields["model_dtype"] = model_dtype
    return StepShape(**fields), keys


_COMMON = (f"{FSDP}.fsdp_size", "trainer.nnodes", "trainer.n_gpus_per_node")
_ACTIVE_KEYS = (f"{A}.ulysses_sequence_parallel_size", f"{M}.enable_gradient_checkpointing", f"{M}.use_remove_padding")


def _terms(trace, budget_keys: tuple[str, ...], *, chunk_keys: tuple[str, ...]) -> dict[str, Term]:
    """The trace's kinds as named terms, each with the keys that change it."""
    from verl_ascend.memory.train_trace import VOCAB_ACT, VOCAB_TEMP

    dtype_keys = (f"{FSDP}.mixed_precision.param_dtype",)
    table = {
        "Sharded Param": ("sharded parameters", (*_COMMON, f"{FSDP}.model_dtype", f"{FSDP}.param_offload")),
        "Sharded Grad": ("gradients", (*_COMMON, f"{FSDP}.model_dtype")),
        "OptState": ("optimizer states", (*_COMMON, f"{A}.optim.optimizer", f"{FSDP}.optimizer_offload")),
        "Buffer": ("buffers", (M + ".path",)),
        "Unsharded Param": ("unsharded parameters", (*dtype_keys, f"{FSDP}.reshard_after_forward",
                                                     f"{FSDP}.forward_prefetch")),
        "All Gather": ("all-gather buffers", (*dtype_keys, f"{FSDP}.forward_prefetch")),
        "Unsharded Grad": ("unsharded gradients", (f"{FSDP}.mixed_precision.reduce_dtype",)),
        "Reduce Scatter": ("reduce-scatter buffers", (f"{FSDP}.mixed_precision.reduce_dtype",)),
        "Activation": ("activations", (*budget_keys, *_ACTIVE_KEYS)),
        "Temp": ("backward temporaries", (*budget_keys, *_ACTIVE_KEYS)),
        "Inputs": ("inputs", budget_keys),
        VOCAB_ACT: ("logits, log-probs, entropy", (*budget_keys, f"{A}.ulysses_sequence_parallel_size", *chunk_keys)),
        VOCAB_TEMP: ("logits' gradients", (*budget_keys, f"{A}.ulysses_sequence_parallel_size", *chunk_keys)),
    }
    return {kind: Term(name, nbytes, SOURCE, keys)
            for kind, nbytes in trace.kinds for name, keys in [table[kind]]}


_RESIDENT = ("Sharded Param", "Sharded Grad", "OptState", "Buffer")
_CHUNK = (f"{FSDP}.entropy_from_logits_with_chunking", f"{FSDP}.entropy_from_logits_chunk_size")


def _role(config: Any) -> str:
    from verl_ascend.trainer_mode import placement

    return "actor_rollout" if placement(config).trainer_rollout else "trainer"


def _host_term(name: str, per_card: int, keys: tuple[str, ...]) -> Term:
    """One card's share of host memory: ``Phase.host`` is per card, and the plan multiplies the largest
    phase's set by ``trainer.n_gpus_per_node`` once, for every phase alike (``residency.host_per_node``)."""
    return Term(f"{name} (offloaded to host)", per_card, f"{SOURCE}: this card's share", keys)


def _update_phase(config, base, role):
    from verl_ascend.memory.train_trace import trace

    shape, keys = _update_shape(config, base)
    terms = _terms(trace(shape), keys, chunk_keys=_CHUNK)
    resident = tuple(terms[k] for k in _RESIDENT if terms[k].bytes)
    active = tuple(t for k, t in terms.items() if k not in _RESIDENT and t.bytes)
    return Phase("actor update", role, resident=resident, active=active), terms


def _log_prob_phase(config, base, role, update_terms):
    from verl_ascend.memory.train_trace import trace

    offloaded = _bool(config, f"{FSDP}.optimizer_offload")
    shape, keys = _log_prob_shape(config, dict(base, keep_optimizer=not offloaded), R, entropy=True)
    terms = _terms(trace(shape), keys, chunk_keys=_CHUNK)
    optimizer = update_terms["OptState"]
    resident = [terms[k] for k in _RESIDENT]
    host = [_host_term(optimizer.name, optimizer.bytes, optimizer.keys)] if offloaded else []
    active = tuple(t for k, t in terms.items() if k not in _RESIDENT and t.bytes)
    return Phase("old log-prob", role, resident=tuple(t for t in resident if t.bytes), active=active,
                 host=tuple(host))


def _ref_phase(config, base, role, update_terms):
    """The reference pass: its shards on the host (CPUOffloadPolicy), the actor as it stays between phases."""
    from verl_ascend.memory.train_trace import trace

    ref_base = dict(base, model_dtype=_dtype(config, f"{REF}.fsdp_config.model_dtype", "bf16"))
    shape, keys = _log_prob_shape(config, ref_base, REF, entropy=False)
    terms = _terms(trace(shape), keys, chunk_keys=())
    ref_shards = terms["Sharded Param"]
    host = [_host_term("reference parameters", ref_shards.bytes,
                       (*_COMMON, f"{REF}.fsdp_config.model_dtype"))]
    resident = [terms["Buffer"]]
    for kind, offload in (("Sharded Param", "param_offload"), ("OptState", "optimizer_offload")):
        term = update_terms[kind]
        if _bool(config, f"{FSDP}.{offload}"):
            host.append(_host_term(f"actor {term.name}", term.bytes, term.keys))
        else:
            resident.append(Term(f"actor {term.name}", term.bytes, term.source, term.keys))
    active = tuple(t for k, t in terms.items() if k not in _RESIDENT and t.bytes)
    return Phase("ref log-prob", role, resident=tuple(t for t in resident if t.bytes), active=active,
                 host=tuple(host))


def recomputes_old_log_prob(config: Any) -> bool:
    """Upstream's _compute_old_log_prob: skipped in rollout correction's bypass mode."""
    return not _bool(config, "algorithm.rollout_correction.bypass_mode")


def uses_reference(config: Any) -> bool:
    """Upstream's need_reference_policy: a KL loss or a KL reward needs the reference model."""
    return _bool(config, "algorithm.use_kl_in_reward") or _bool(config, f"{A}.use_kl_loss")


def plan_training(config: Any, *, overrides: Mapping[str, object] | None = None) -> tuple[Phase, ...]:
    """The training phases of one step on a trainer card (see the module docstring for what is modelled)."""
    config = _with_overrides(config, overrides)
    hf = load_architecture(config)
    base = _shape_kwargs(config, hf)
    role = _role(config)
    update, update_terms = _update_phase(config, base, role)
    phases = []  # in the order a step runs them
    if recomputes_old_log_prob(config):
        phases.append(_log_prob_phase(config, base, role, update_terms))
    if uses_reference(config):
        phases.append(_ref_phase(config, base, role, update_terms))
    return (*phases, update)


def phase_shapes(config: Any, *, overrides: Mapping[str, object] | None = None) -> dict:
    """The traced program of each phase ({phase name: StepShape}), for measuring the same program."""
    config = _with_overrides(config, overrides)
    base = _shape_kwargs(config, load_architecture(config))
    shapes = {"actor update": _update_shape(config, base)[0]}
    if recomputes_old_log_prob(config):
        offloaded = _bool(config, f"{FSDP}.optimizer_offload")
        shapes["old log-prob"] = _log_prob_shape(config, dict(base, keep_optimizer=not offloaded), R,
                                                 entropy=True)[0]
    return shapes
