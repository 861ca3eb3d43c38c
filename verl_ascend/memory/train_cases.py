"""The configurations the training plan is held to on this CPU: the tiny recipe over 2 gloo ranks.

Each case is dapo_tiny_cpu with Hydra-style overrides and the phase measured; the plan and the
measurement both take the phase's program from :func:`verl_ascend.memory.training.phase_shapes`, so the
case exercises the config reading too. The tiny recipe's model has one attention head, which Ulysses
cannot split; the Ulysses cases use the same model with 2 heads of 32 (``ulysses_model``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

A = "actor_rollout_ref.actor"
FSDP = f"{A}.fsdp_config"
R = "actor_rollout_ref.rollout"
M = "actor_rollout_ref.model"

BASE = {"trainer.n_gpus_per_node": 2}
PACKED = {f"{M}.use_remove_padding": True, f"{A}.use_dynamic_bsz": True, f"{A}.ppo_max_token_len_per_gpu": 512}
PACKED_LOG_PROB = {f"{M}.use_remove_padding": True, f"{R}.log_prob_use_dynamic_bsz": True,
                   f"{R}.log_prob_max_token_len_per_gpu": 512}
ULYSSES = {f"{A}.ulysses_sequence_parallel_size": 2}
CHUNKED = {f"{FSDP}.entropy_from_logits_with_chunking": True, f"{FSDP}.entropy_from_logits_chunk_size": 64}
OFFLOAD = {f"{FSDP}.param_offload": True, f"{FSDP}.optimizer_offload": True}
CHECKPOINTING = {f"{M}.enable_gradient_checkpointing": True}


@dataclass(frozen=True)
class Case:
    name: str
    phase: str  # "actor update" or "old log-prob"
    overrides: dict
    ulysses_model: bool = False


CASES = (
    Case("padded, 16 sequences (256 tokens)", "actor update", {f"{A}.ppo_micro_batch_size_per_gpu": 16}),
    Case("padded, 32 sequences (512 tokens)", "actor update", {f"{A}.ppo_micro_batch_size_per_gpu": 32}),
    Case("packed, 512-token budget", "actor update", PACKED),
    Case("packed 512, checkpointing", "actor update", {**PACKED, **CHECKPOINTING}),
    Case("packed 512, offload", "actor update", {**PACKED, **OFFLOAD}),
    Case("Ulysses 2, 256 tokens/card", "actor update", {**PACKED, **ULYSSES, f"{A}.ppo_max_token_len_per_gpu": 256},
         ulysses_model=True),
    Case("Ulysses 2, checkpointing, chunked entropy", "actor update",
         {**PACKED, **ULYSSES, **CHECKPOINTING, **CHUNKED, f"{A}.entropy_coeff": 0.01}, ulysses_model=True),
    Case("log-prob, packed 512", "old log-prob", PACKED_LOG_PROB),
    Case("log-prob, packed 512, chunked entropy", "old log-prob", {**PACKED_LOG_PROB, **CHUNKED}),
    Case("log-prob, Ulysses 2, offload", "old log-prob", {**PACKED_LOG_PROB, **ULYSSES, **OFFLOAD},
         ulysses_model=True),
)


def ulysses_model(source: Path, folder: Path) -> Path:
    """The tiny model's config.json with 2 attention heads (of 32) and 2 KV heads, in ``folder``."""
    data = json.loads((Path(source) / "config.json").read_text())
    data.update(num_attention_heads=2, num_key_value_heads=2)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data, indent=2))
    return folder


def case_overrides(case: Case, tiny_model: Path, scratch: Path) -> dict:
    """Every override of ``case`` on top of dapo_tiny_cpu, with the model folder it runs."""
    model = ulysses_model(tiny_model, scratch / "ulysses_model") if case.ulysses_model else tiny_model
    return {**BASE, **case.overrides, f"{M}.path": str(model)}
