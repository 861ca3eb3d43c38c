"""What stays on a card between phases, per trainer mode, and the phases this adds to a step.

Why per mode (``verl_ascend/trainer_mode.py``): in ``sync`` and ``colocate_async`` the actor and the
rollout engine share each card (upstream's hybrid engine), so each phase carries the other's remainder;
in ``separate_async`` the rollout has cards of its own and weights move through a checkpoint engine.

Sources, each named in its term:
- the sleeping engine (verl 0.9.1 ``vllm_async_server.py``: ``sleep()`` when ``rollout.free_cache_engine``;
  ``_resolve_sleep_level`` picks level 1 on NPU): vllm-ascend v0.23.0 ``worker.py::sleep`` calls
  ``CaMemAllocator.sleep(offload_tags=("weights",))`` at level 1 (``device_allocator/camem.py``): weights
  are copied to pinned host memory, the KV cache is discarded, and memory outside the pool stays -- the
  communicators' buffers (non-torch) and ``sleep_persistent`` allocations. Level 2 discards the weights too.
  About 240 MB more per sleep/wake cycle (vllm-ascend #9563) is not counted: the headroom warning is for it.
- the actor between training phases: offloaded to host by ``fsdp_config.param_offload`` /
  ``optimizer_offload``, otherwise resident (sharded parameters, optimizer states).
- the weight update (verl #6772): the woken engine's weights, the actor's sharded parameters staged on the
  card, each parameter all-gathered whole in turn (``get_per_tensor_param``: ``full_tensor()``), and the
  transfer bucket ``rollout.checkpoint_engine.update_weights_bucket_megabytes``.
- HCCL buffers: 2 x HCCL_BUFFSIZE per communicator of the trainer process (the world group, FSDP's shard
  and replicate groups when ``fsdp_size`` is below the world, Ulysses' sequence and data groups).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from verl_ascend import trainer_mode
from verl_ascend.memory.devices import DeviceMemory
from verl_ascend.memory.rollout import R, Rollout, _sel, plan_rollout
from verl_ascend.memory.terms import Phase, Term

A = "actor_rollout_ref.actor."
FSDP = A + "fsdp_config."
BUCKET = R + "checkpoint_engine.update_weights_bucket_megabytes"
SLEEP_SOURCE = ("vllm-ascend v0.23.0 worker.py::sleep -> device_allocator/camem.py CaMemAllocator.sleep "
                "(level 1: weights to pinned host memory, KV cache discarded)")


def world(config: Any) -> int:
    return int(_sel(config, "trainer.nnodes", 1)) * int(_sel(config, "trainer.n_gpus_per_node", 1))


def shards(config: Any) -> int:
    size = int(_sel(config, FSDP + "fsdp_size", -1))
    return world(config) if size <= 0 or size > world(config) else size


def trainer_communicators(config: Any) -> int:
    """Device communicators of one trainer process (each only when larger than one card)."""
    n = 1 if world(config) > 1 else 0
    n += 2 if shards(config) < world(config) else 0
    n += 2 if int(_sel(config, A + "ulysses_sequence_parallel_size", 1)) > 1 else 0
    return n


def trainer_comm(config: Any, card: DeviceMemory) -> Term:
    n = trainer_communicators(config)
    return Term("trainer HCCL buffers", n * card.comm_buffer_bytes, f"{n} communicators x {card.comm_source}",
                (FSDP + "fsdp_size", A + "ulysses_sequence_parallel_size"))


def _flag(config: Any, key: str) -> bool:
    from verl_ascend.envs import parse_bool

    value = OmegaConf.select(config, key, default=False)
    return parse_bool(key, value) if isinstance(value, str) else bool(value)


def sleeping_engine(config: Any, rollout: Rollout) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """(on the card, on the host) of the engine while the actor trains on its card."""
    if rollout.engine != "vllm" or not _flag(config, R + "free_cache_engine"):
        why = f"{R}free_cache_engine=false: the engine keeps everything" if rollout.engine == "vllm" else \
            f"{R}name={rollout.engine}: the server keeps its weights"
        kept = (Term("engine weights (awake)", rollout.weights.bytes, why, rollout.weights.keys + (R + "free_cache_engine",)),
                Term("KV cache (awake)", rollout.kv_cache.bytes, why, rollout.kv_cache.keys + (R + "free_cache_engine",)))
        return kept + (rollout.comm,), ()
    remainder = Term("sleeping engine (HCCL buffers)", rollout.comm.bytes, SLEEP_SOURCE, rollout.comm.keys)
    host = Term("engine weights (slept to host)", rollout.weights.bytes, SLEEP_SOURCE, rollout.weights.keys)
    return (remainder,), (host,)


def actor_between(training: tuple[Phase, ...], config: Any) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """(on the card, on the host) of the actor while the engine generates: its update phase's model
    state, each term where offload puts it (``param_offload``: parameters; ``optimizer_offload``: optimizer
    states; gradients are freed after the step)."""
    update = next((p for p in training if p.name == "actor update"), None)
    card, host = [], []
    for term in update.resident if update else ():
        name = term.name.lower()
        if "grad" in name:
            continue
        offloaded = _flag(config, FSDP + ("optimizer_offload" if "optim" in name else "param_offload"))
        (host if offloaded else card).append(Term(f"actor {term.name}" + (" (offloaded)" if offloaded else ""),
                                                  term.bytes, term.source, term.keys))
    return tuple(card), tuple(host)


def largest_parameter(arch: Any, config: Any) -> int:
    """Bytes of the largest single parameter, all-gathered whole during the weight update (fp32 master)."""
    h, v = int(arch.hidden_size), int(arch.vocab_size)
    inter = int(getattr(arch, "intermediate_size", 4 * h))
    return max(v * h, h * inter) * 4


def weight_update(config: Any, arch: Any, rollout: Rollout, training: tuple[Phase, ...], comm: Term,
                  role: str, *, engine: bool = True) -> Phase:
    """The weight update of verl #6772: engine weights awake, actor staged, one whole parameter, a bucket."""
    update = next((p for p in training if p.name == "actor update"), None)
    params = next((t for t in (update.resident if update else ()) if "param" in t.name.lower()), None)
    whole = rollout.weights.bytes * rollout.tp  # the whole model in the engine's dtype
    bucket = min(int(_sel(config, BUCKET, 2048)) * 1024**2, whole)  # a bucket holds at most the whole model
    src = "verl 0.9.1 workers/engine/fsdp/transformer_impl.py::get_per_tensor_param"
    active = [Term("whole parameter (all-gathered)", largest_parameter(arch, config), src, (A + "strategy",)),
              Term("weight bucket", bucket, "verl 0.9.1 checkpoint engine bucket (at most the whole model)", (BUCKET,))]
    if params is not None:
        active.insert(0, Term("actor sharded parameters (staged)", params.bytes, src, params.keys))
    resident = [comm]
    if engine:
        resident += [Term("engine weights (woken)", rollout.weights.bytes, "vLLM wake_up(tags=['weights'])",
                          rollout.weights.keys), rollout.comm]
    return Phase("weight update", role, resident=tuple(resident), active=tuple(active))


def colocated(config: Any, arch: Any, card: DeviceMemory, training: tuple[Phase, ...]) -> tuple[Phase, ...]:
    """sync / colocate_async: actor and engine on every card of one pool."""
    comm = trainer_comm(config, card)
    actor_card, actor_host = actor_between(training, config)
    rollout = plan_rollout(config, arch, card)
    engine_card, engine_host = sleeping_engine(config, rollout)
    phases = [Phase("rollout", "actor_rollout", resident=(comm, *actor_card), active=rollout.terms, host=actor_host)]
    phases.append(weight_update(config, arch, rollout, training, comm, "actor_rollout"))
    for p in training:
        phases.append(Phase(p.name, "actor_rollout", resident=(comm, *engine_card, *p.resident), active=p.active,
                            host=(*engine_host, *p.host)))
    return tuple(phases), rollout


def separate(config: Any, arch: Any, card: DeviceMemory, training: tuple[Phase, ...]) -> tuple[Phase, ...]:
    """separate_async: the trainer pool trains and sends; the rollout pool generates and receives."""
    comm = Term("trainer HCCL buffers", (trainer_communicators(config) + 1) * card.comm_buffer_bytes,
                f"{trainer_communicators(config) + 1} communicators (with the weight-sync engine's) x {card.comm_source}",
                (FSDP + "fsdp_size", A + "ulysses_sequence_parallel_size", R + "checkpoint_engine.backend"))
    rollout = plan_rollout(config, arch, card)
    phases = [Phase(p.name, "trainer", resident=(comm, *p.resident), active=p.active, host=p.host) for p in training]
    phases.append(weight_update(config, arch, rollout, training, comm, "trainer", engine=False))
    phases.append(Phase("rollout", "rollout", resident=(), active=rollout.terms))
    bucket = min(int(_sel(config, BUCKET, 2048)) * 1024**2, rollout.weights.bytes * rollout.tp)
    receive = Phase("weight sync (receive)", "rollout", resident=(rollout.weights, rollout.comm),
                    active=(Term("received buckets (2, double-buffered)", 2 * bucket,
                                 "verl 0.9.1 checkpoint_engine (send/receive overlap)", (BUCKET,)),))
    phases.append(receive)
    return tuple(phases), rollout


def phases(config: Any, arch: Any, card: DeviceMemory, training: tuple[Phase, ...]):
    """Every phase of one step on each card role of this config's trainer mode, and the rollout's figures."""
    if trainer_mode.placement(config).rollout_pool:
        return separate(config, arch, card, training)
    return colocated(config, arch, card, training)


def host_per_node(plan_phases: tuple[Phase, ...], config: Any) -> int:
    """Host memory per node for offloaded states: the largest per-card host set of any phase x cards per node."""
    per_card = max((sum(t.bytes for t in p.host) for p in plan_phases), default=0)
    return per_card * int(_sel(config, "trainer.n_gpus_per_node", 1))

