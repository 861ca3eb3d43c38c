"""TEMPORARY STUB of memtrain's training planner (branch i36-train owns this file; the lead takes theirs).

Same interface as the real one: ``load_architecture(config)`` and ``plan_training(config, *, overrides)``.
The real planner traces verl's micro-batch path under fake tensors; this stub returns hand-computed
Phases from the architecture's shapes so the rest of the plan (rollout, residency, verdict, advice,
command, checks) can run and be tested. Nothing else belongs in this file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from omegaconf import OmegaConf

from verl_ascend.memory.terms import Phase, PlanInputError, Term

MODEL_KEY = "actor_rollout_ref.model.path"
SOURCE = "STUB formula (verl_ascend/memory/training.py stub, until memtrain's fake-tensor trace merges)"
# Qwen2.5-32B's config.json (the hub's), for a path that is not a local folder.
_SHIPPED = {"qwen2.5-32b": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=5120,
                                 intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
                                 num_key_value_heads=8, vocab_size=152064, max_position_embeddings=131072,
                                 rms_norm_eps=1e-5, rope_theta=1000000.0, tie_word_embeddings=False,
                                 torch_dtype="bfloat16")}


def load_architecture(config):
    from transformers import AutoConfig

    raw = OmegaConf.select(config, MODEL_KEY, default=None)
    if not raw:
        raise PlanInputError(f"{MODEL_KEY}: not set; accepted: a model folder with config.json or a hub id")
    folder = Path(os.path.expanduser(str(raw)))
    if (folder / "config.json").is_file():
        return AutoConfig.from_pretrained(str(folder))
    shipped = _SHIPPED.get(folder.name.lower())
    if shipped:
        data = dict(shipped)
        return AutoConfig.for_model(data.pop("model_type"), **data)
    raise PlanInputError(f"{MODEL_KEY}={raw}: no config.json at {folder / 'config.json'}; accepted: a model folder "
                         f"with config.json or one of {sorted(_SHIPPED)}")


def _get(config, key, overrides, default=None):
    if overrides and key in overrides:
        return overrides[key]
    value = OmegaConf.select(config, key, default=default)
    return default if value is None else value


def _params(arch) -> int:
    h, i, L, v = arch.hidden_size, arch.intermediate_size, arch.num_hidden_layers, arch.vocab_size
    kv = arch.num_key_value_heads * (h // arch.num_attention_heads)
    layer = h * h + 2 * h * kv + h * h + 3 * h * i + (h + 2 * kv) + 2 * h
    return L * layer + v * h * (1 if arch.tie_word_embeddings else 2) + h


def plan_training(config, *, overrides: Mapping[str, object] | None = None) -> tuple[Phase, ...]:
    arch = load_architecture(config)
    a = "actor_rollout_ref.actor."
    world = int(_get(config, "trainer.nnodes", overrides, 1)) * int(_get(config, "trainer.n_gpus_per_node", overrides, 1))
    fsdp = int(_get(config, a + "fsdp_config.fsdp_size", overrides, -1))
    shards = world if fsdp in (-1, 0) or fsdp > world else fsdp
    n = _params(arch)
    fp32 = 4 if str(_get(config, a + "fsdp_config.model_dtype", overrides, "fp32")) in ("fp32", "float32") else 2
    pbytes = 2 if fp32 == 4 and arch.torch_dtype is not None and str(_get(config, a + "fsdp_config.mixed_precision.param_dtype", overrides, "bf16")) in ("bf16", "bfloat16") else fp32
    param_off = bool(_get(config, a + "fsdp_config.param_offload", overrides, False))
    optim_off = bool(_get(config, a + "fsdp_config.optimizer_offload", overrides, False))
    dyn = bool(_get(config, a + "use_dynamic_bsz", overrides, False))
    tokens = int(_get(config, a + "ppo_max_token_len_per_gpu", overrides, 16384)) if dyn else (
        int(_get(config, a + "ppo_micro_batch_size_per_gpu", overrides, 1) or 1)
        * (int(_get(config, "data.max_prompt_length", overrides, 512)) + int(_get(config, "data.max_response_length", overrides, 512))))
    budget_keys = (a + "ppo_max_token_len_per_gpu",) if dyn else (a + "ppo_micro_batch_size_per_gpu",)
    ckpt = bool(_get(config, "actor_rollout_ref.model.enable_gradient_checkpointing", overrides, False))
    h, L, v, inter = arch.hidden_size, arch.num_hidden_layers, arch.vocab_size, arch.intermediate_size
    layer_act = tokens * (16 * h + 4 * inter) * pbytes
    acts = tokens * h * pbytes * L + layer_act if ckpt else layer_act * L
    layer_params = (n - 2 * v * h) // L
    model = (a + "fsdp_config.fsdp_size", "trainer.nnodes", "trainer.n_gpus_per_node")
    state = [Term("sharded parameters", fp32 * n // shards, SOURCE, model + (a + "fsdp_config.param_offload",))]
    update = state + [Term("sharded gradients", fp32 * n // shards, SOURCE, model),
                      Term("optimizer states (Adam, fp32)", 2 * 4 * n // shards, SOURCE, model + (a + "fsdp_config.optimizer_offload",))]
    gather = Term("FSDP all-gather buffers (2 layers)", 2 * layer_params * pbytes, SOURCE, (a + "strategy",))
    logits = Term("logits (fp32) and log-probs", 3 * tokens * v * 4, SOURCE,
                  budget_keys + (a + "fsdp_config.entropy_from_logits_with_chunking",))
    host_model = [Term("offloaded parameters", fp32 * n // shards, SOURCE, (a + "fsdp_config.param_offload",))] if param_off else []
    host_optim = [Term("offloaded optimizer states", 2 * 4 * n // shards, SOURCE, (a + "fsdp_config.optimizer_offload",))] if optim_off else []
    phases = [Phase("actor update", "actor_rollout", resident=tuple(update),
                    active=(gather, Term("activations", acts, SOURCE, budget_keys + ("actor_rollout_ref.model.enable_gradient_checkpointing",)), logits),
                    host=tuple(host_model + host_optim))]
    lp_dyn = bool(_get(config, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", overrides, dyn))
    lp_tokens = int(_get(config, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", overrides, tokens)) if lp_dyn else tokens
    lp_keys = ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",) if lp_dyn else ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",)
    lp = (gather, Term("activations (no grad)", 2 * lp_tokens * (4 * h + 2 * inter) * pbytes, SOURCE, lp_keys),
          Term("logits (fp32) and log-probs", 2 * lp_tokens * v * 4, SOURCE, lp_keys))
    phases.append(Phase("old log-prob", "actor_rollout", resident=tuple(state), active=lp, host=tuple(host_optim)))
    if bool(_get(config, "algorithm.use_kl_in_reward", overrides, False)) or bool(_get(config, a + "use_kl_loss", overrides, False)):
        phases.append(Phase("ref log-prob", "actor_rollout", resident=tuple(state), active=lp))
    return tuple(phases)
