"""Layout rules: how cards, batches and token budgets must divide, checked before Ray starts.

Each of these either fails deep inside a worker after the cluster and the 32B model have loaded
(device-mesh shapes, the dynamic-batch token assertion after a whole rollout) or silently wastes
cards (idle ranks, padded mini-batches). Arithmetic on the config catches all of them in
milliseconds. Upstream 0.9.1 code each rule mirrors is named in its message.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.view import ACTOR, REF, ROLLOUT, ConfigView


def rollout_tp_layout(view: ConfigView) -> Iterator[Finding]:
    """Rollout TP groups must tile each node exactly; replicas must tile the cluster."""
    tp = view.get_int(f"{ROLLOUT}.tensor_model_parallel_size", 1)
    dp = view.get_int(f"{ROLLOUT}.data_parallel_size", 1) or 1
    pp = view.get_int(f"{ROLLOUT}.pipeline_model_parallel_size", 1) or 1
    per_node = view.get_int(f"{ROLLOUT}.n_gpus_per_node") or view.cards_per_node
    keys = (f"{ROLLOUT}.tensor_model_parallel_size", "trainer.n_gpus_per_node")
    if tp is None or tp < 1:
        yield Finding("rollout_tp_layout", ERROR, f"rollout tensor_model_parallel_size={tp} must be >= 1.", keys)
        return
    if per_node % tp != 0:
        detail = (
            f"a TP group of {tp} would span nodes, putting every decode step's all-reduce on the inter-node "
            "network (and mc2 fuses matmul+all-reduce only within a node)"
            if tp > per_node
            else f"{per_node % tp} card(s) per node would sit idle or a TP group would straddle two nodes"
        )
        divisors = [d for d in (1, 2, 4, 8, 16) if per_node % d == 0]
        yield Finding(
            "rollout_tp_layout",
            ERROR,
            f"rollout TP {tp} does not divide the {per_node} cards per node: {detail}. "
            f"Use a TP that divides {per_node} (one of {divisors}).",
            keys,
        )
        return
    replica = tp * dp * pp
    world = view.world_size
    if world % replica != 0:
        yield Finding(
            "rollout_tp_layout",
            ERROR,
            f"a rollout replica takes TP {tp} x DP {dp} x PP {pp} = {replica} cards, which does not divide the "
            f"{world} cards of the job: upstream cannot place the last replica. Make {replica} divide {world}.",
            keys + (f"{ROLLOUT}.data_parallel_size", f"{ROLLOUT}.pipeline_model_parallel_size", "trainer.nnodes"),
        )


def fsdp_size_layout(view: ConfigView) -> Iterator[Finding]:
    """fsdp_size builds a (world/fsdp_size, fsdp_size) device mesh (workers/engine/fsdp/utils.py)."""
    world = view.world_size
    for role in view.training_roles():
        if view.get(f"{role}.strategy", view.get(f"{ACTOR}.strategy", "fsdp")) not in ("fsdp", "fsdp2"):
            continue
        key = f"{role}.fsdp_config.fsdp_size"
        size = view.get_int(key, -1)
        if size is None or size == -1:
            continue
        if size <= 0:
            yield Finding(
                "fsdp_size_layout",
                ERROR,
                f"{key}={size}: use -1 (shard over all cards) or a positive divisor of {world}.",
                (key,),
            )
        elif size > world:
            yield Finding(
                "fsdp_size_layout",
                WARN,
                f"{key}={size} exceeds the {world} cards of the job: upstream silently shards over all {world} "
                f"instead. Set {key}={world} (or -1) so the config says what runs.",
                (key, "trainer.nnodes", "trainer.n_gpus_per_node"),
            )
        elif world % size != 0:
            divisors = [d for d in (8, 16, 32, 64, 128, 256) if d <= world and world % d == 0]
            yield Finding(
                "fsdp_size_layout",
                ERROR,
                f"{key}={size} does not divide the world size {world} (trainer.nnodes x trainer.n_gpus_per_node): "
                f"the ({world}//{size}, {size}) device mesh cannot be built and every training worker fails at "
                f"start-up. Use a divisor of {world}, e.g. {divisors or [world]}.",
                (key, "trainer.nnodes", "trainer.n_gpus_per_node"),
            )


def batch_divisibility(view: ConfigView) -> Iterator[Finding]:
    """The V1 trainer pads a step's batch up to lcm(dp, mini_batch x n) with dummy sequences."""
    train = view.get_int("data.train_batch_size")
    mini = view.get_int(f"{ACTOR}.ppo_mini_batch_size")
    n = view.get_int(f"{ROLLOUT}.n", 1) or 1
    if not train or not mini:
        return
    if train % mini != 0:
        yield Finding(
            "batch_not_divisible",
            ERROR,
            f"data.train_batch_size={train} is not a multiple of actor.ppo_mini_batch_size={mini}: every step "
            f"the V1 trainer pads the batch with {(-train) % mini * n} dummy sequences so the last of "
            f"{math.ceil(train / mini)} optimizer updates runs on a partial batch. Make ppo_mini_batch_size divide "
            f"train_batch_size (e.g. {_nearest_divisor(train, mini)}).",
            ("data.train_batch_size", f"{ACTOR}.ppo_mini_batch_size"),
        )
    dp = max(view.world_size // view.ulysses_size, 1)
    if (mini * n) % dp != 0:
        yield Finding(
            "batch_not_divisible",
            WARN,
            f"a mini-batch of {mini} prompts x {n} responses = {mini * n} sequences does not split evenly over "
            f"{dp} data-parallel ranks: batches are padded to a multiple of lcm({dp}, {mini * n}). "
            f"Choose ppo_mini_batch_size x rollout.n divisible by {dp}.",
            (f"{ACTOR}.ppo_mini_batch_size", f"{ROLLOUT}.n", "trainer.n_gpus_per_node"),
        )


def dynamic_bsz_token_budget(view: ConfigView) -> Iterator[Finding]:
    """With dynamic batching a micro-batch holds max_token_len_per_gpu x sp tokens (workers/engine/utils.py)."""
    if not view.get_bool(f"{ACTOR}.use_dynamic_bsz"):
        return
    need = view.sequence_budget
    if need is None:
        return
    sp = view.ulysses_size
    budgets = [f"{ACTOR}.ppo_max_token_len_per_gpu", f"{ROLLOUT}.log_prob_max_token_len_per_gpu"]
    if view.uses_reference_model:
        budgets.append(f"{REF}.log_prob_max_token_len_per_gpu")
    for key in budgets:
        per_gpu = view.get_int(key)
        if per_gpu is not None and per_gpu * sp < need:
            yield Finding(
                "dynamic_bsz_token_budget",
                ERROR,
                f"{key}={per_gpu} x ulysses {sp} = {per_gpu * sp} tokens per micro-batch is less than one "
                f"full-length sequence (max_prompt_length + max_response_length = {need}): the first response "
                "that reaches the limit fails the step ('max_token_len must be greater than the sequence length') "
                f"after the whole rollout has been paid for. Set {key} >= {math.ceil(need / sp)}.",
                (key, "data.max_prompt_length", "data.max_response_length", f"{ACTOR}.ulysses_sequence_parallel_size"),
            )


RULES = (rollout_tp_layout, fsdp_size_layout, batch_divisibility, dynamic_bsz_token_budget)


def _nearest_divisor(total: int, near: int) -> int:
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    return min(divisors, key=lambda d: (abs(d - near), -d))
