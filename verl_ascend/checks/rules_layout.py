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
from verl_ascend.checks.pipeline import tag
from verl_ascend.checks.view import ACTOR, REF, ROLLOUT, ConfigView
from verl_ascend.trainer_mode import mode_of


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
    """How a step's batch must divide, the way upstream 0.9.1 splits it (the one batch check).

    The V1 trainer updates the actor once per ``ppo_mini_batch_size`` prompts, each a mini-batch of
    ``ppo_mini_batch_size x rollout.n`` responses (``trainer/ppo/ray_trainer.py::_update_actor``); every
    training worker asserts that this splits over its data-parallel group,
    ``mini_batch_size % (world_size // ulysses_sequence_parallel_size) == 0``
    (``workers/engine_workers.py::train_mini_batch``, ``get_data_parallel_size`` of the FSDP engine), and
    splits its share into micro-batches of ``ppo_micro_batch_size_per_gpu``.
    """
    train = view.get_int("data.train_batch_size")
    mini = view.get_int(f"{ACTOR}.ppo_mini_batch_size")
    n = view.get_int(f"{ROLLOUT}.n", 1)
    if not train or not mini or not n or train <= 0 or mini <= 0 or n <= 0:
        return  # not set or out of range: the typed-key check names it
    mini_key, train_key, n_key = f"{ACTOR}.ppo_mini_batch_size", "data.train_batch_size", f"{ROLLOUT}.n"
    if train % mini != 0:
        yield Finding(
            "batch_not_divisible",
            ERROR,
            f"{train_key}={train} is not divisible by {mini_key}={mini}: every step the V1 trainer pads the batch "
            f"with {(-train) % mini * n} dummy sequences so the last of {math.ceil(train / mini)} optimizer updates "
            "runs on a partial batch",
            (train_key, mini_key),
            accepted=f"a ppo_mini_batch_size that divides {train} (e.g. {', '.join(map(str, _divisors(train)))})",
        )
    world, sp = view.world_size, view.ulysses_size
    sp_key = f"{ACTOR}.ulysses_sequence_parallel_size"
    if world % sp != 0:
        yield Finding(
            "batch_not_divisible",
            ERROR,
            f"{sp_key}={sp} does not divide the {world} cards of the job (trainer.nnodes x trainer.n_gpus_per_node): "
            "the (data-parallel, sequence-parallel) device mesh cannot be built",
            (sp_key, "trainer.nnodes", "trainer.n_gpus_per_node"),
            accepted=f"an ulysses_sequence_parallel_size that divides {world}",
        )
        return
    dp = world // sp
    per_mini = mini * n
    if per_mini % dp != 0:
        yield Finding(
            "batch_not_divisible",
            ERROR,
            f"{mini_key}={mini} x {n_key}={n} = {per_mini} responses per mini-batch cannot be split over {dp} "
            f"data-parallel ranks ({world} cards (trainer.nnodes x trainer.n_gpus_per_node) / ulysses "
            f"{sp}): every training worker asserts mini_batch_size % data-parallel size == 0 "
            "(workers/engine_workers.py)",
            (mini_key, n_key, "trainer.nnodes", "trainer.n_gpus_per_node", sp_key),
            accepted=f"a multiple of {dp} responses per mini-batch",
        )
        return
    if view.get_bool(f"{ACTOR}.use_dynamic_bsz"):
        return
    shares = [(f"{ACTOR}.ppo_micro_batch_size_per_gpu", per_mini // dp, "mini-batch", (mini_key, n_key))]
    if old_log_probs_recomputed(view):
        sync_key, sync_step = _sync_step(view)
        share = (train // sync_step if sync_step and train % sync_step == 0 else train) * n // dp
        what = ("step" if sync_step in (None, 1) else
                f"old-log-prob pass ({train_key}={train} / {sync_key}={sync_step} prompts x {n_key}={n})")
        shares.append((f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", share, what,
                       (train_key, n_key) + ((sync_key,) if sync_step not in (None, 1) else ())))
    for key, per_rank, what, culprits in shares:
        micro = view.get(key)
        if micro is None:
            continue
        size = view.get_int(key)
        if size is None or size <= 0 or per_rank % size != 0:
            yield Finding(
                "batch_not_divisible",
                ERROR,
                f"{key}={micro} does not divide the {per_rank} responses each data-parallel rank gets per {what}: "
                "every worker asserts data size % micro_batch_size_per_gpu == 0 (verl/workers/engine/utils.py, "
                "prepare_micro_batches) at step 1",
                (key, *culprits),
                accepted=f"one of {_divisors(per_rank)}, or {ACTOR}.use_dynamic_bsz=true",
            )


BYPASS = "algorithm.rollout_correction.bypass_mode"


def old_log_probs_recomputed(view: ConfigView) -> bool:
    """Whether the trainer recomputes old log-probs (``_compute_old_log_prob``); bypass mode reuses the rollout's."""
    return not view.get_bool(BYPASS, False)


def _sync_step(view: ConfigView) -> tuple[str, int | None]:
    """The mode's ``parameter_sync_step`` (upstream's default 1): each step runs that many local updates, each
    sampling ``train_batch_size / parameter_sync_step`` prompts and recomputing their old log-probs
    (``PPOTrainer.step``, ``verl/trainer/ppo/v1/trainer_base.py``)."""
    key = f"trainer.v1.{mode_of(view)}.parameter_sync_step"
    step = view.get_int(key)
    return key, (step if step and step > 0 else 1)


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


tag(batch_divisibility, launch=True)  # preflight checked it at every launch: VERL_ASCEND_DOCTOR=0 keeps it

RULES = (rollout_tp_layout, fsdp_size_layout, batch_divisibility, dynamic_bsz_token_budget)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0][:8]
