"""What a CPU-only machine needs in a trainer config, supplied before the run starts.

Upstream's defaults assume GPUs: ``trainer.device=cuda``, FlashAttention-2, FSDP1 (which pins
modules to ``device_id``), and a Ray cluster sized by the machine's cores, on which
TransferQueue's storage actors and the training placement groups (3 CPU slots per rank) never
fit on a 2-core laptop -- the run then waits forever with no error. The CPU platform answers
these here, called by the ``cpu_auto_set_device`` hook (patch index) right after upstream's
``auto_set_device``, so ``python -m verl.trainer.main_ppo`` and every other upstream entry point
run with user-level overrides only. A value the user chose that cannot work on a CPU fails at
once with :class:`CPUConfigError`, naming the key and what would be accepted.

Only keys that exist in the config are touched: the same call serves SFT configs, which have
no ``actor_rollout_ref`` or ``ray_kwargs``.
"""

from __future__ import annotations

import logging
import os

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_ascend import trainer_mode

logger = logging.getLogger(__name__)

FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3")
ATTENTION_KEYS = ("actor_rollout_ref.model.override_config", "critic.model.override_config")
# FSDP1 passes device_id=<accelerator index> to FullyShardedDataParallel: refused on a CPU.
STRATEGY_KEYS = ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
# Each training rank's placement-group bundle holds this many CPU slots (upstream's FSDP pools).
CPU_SLOTS_PER_RANK = 3


class CPUConfigError(ValueError):
    """A setting that cannot work on a CPU-only machine (the message names the key)."""


def apply(config: DictConfig) -> list[str]:
    """Fill in what a CPU run needs; return one line per change (also logged)."""
    changes: list[str] = []
    with open_dict(config):
        if OmegaConf.select(config, "trainer.device") not in (None, "cpu"):
            changes.append(f"trainer.device: {config.trainer.device} -> cpu")
            config.trainer.device = "cpu"
        changes += _attention(config)
        changes += _strategy(config)
        changes += _hf_rollout_parallelism(config)
        changes += _separate_async(config)
        changes += _ray_slots(config)
    for line in changes:
        logger.warning("[verl.cpu] %s", line)
    return changes


def _attention(config: DictConfig) -> list[str]:
    changes = []
    for key in ATTENTION_KEYS:
        override = OmegaConf.select(config, key)
        if override is None:
            continue
        chosen = override.get("attn_implementation")
        if chosen in FLASH_ATTENTION:
            raise CPUConfigError(
                f"{key}.attn_implementation={chosen} needs a CUDA GPU; on a CPU use sdpa or eager "
                f"(or leave it unset: the CPU platform picks sdpa)"
            )
        if chosen is None:
            override["attn_implementation"] = "sdpa"
            changes.append(f"{key}.attn_implementation: (upstream default flash_attention_2) -> sdpa")
    return changes


def _strategy(config: DictConfig) -> list[str]:
    changes = []
    for key in STRATEGY_KEYS:
        if OmegaConf.select(config, key) == "fsdp" and not _is_interpolation(config, key):
            parent, leaf = key.rsplit(".", 1)
            OmegaConf.select(config, parent)[leaf] = "fsdp2"
            changes.append(f"{key}: fsdp -> fsdp2 (FSDP1 pins modules to an accelerator index)")
    return changes


def _hf_rollout_parallelism(config: DictConfig) -> list[str]:
    """The ``hf`` rollout server is one process per replica; upstream's default is TP=2."""
    rollout = OmegaConf.select(config, "actor_rollout_ref.rollout")
    if rollout is None or rollout.get("name") != "hf" or rollout.get("tensor_model_parallel_size") in (None, 1):
        return []
    tp = rollout.tensor_model_parallel_size
    rollout.tensor_model_parallel_size = 1
    return [f"actor_rollout_ref.rollout.tensor_model_parallel_size: {tp} -> 1 (the hf rollout server is one process)"]


# Upstream's separate_async trainer moves weights into a rollout pool of its own through a checkpoint
# engine; every engine upstream ships needs a device or one shared process ("naive", which it refuses).
ENGINE = "actor_rollout_ref.rollout.checkpoint_engine"
GLOO_MODULE = "verl.cpu.checkpoint_engine"
DEVICE_ENGINES = ("nccl", "nixl", "mooncake", "kimi_ckpt_engine")  # upstream names; nccl is HCCL on NPU


def _separate_async(config: DictConfig) -> list[str]:
    """In ``separate_async``: the gloo weight-sync engine and a one-slot rollout pool, where the user set neither."""
    if not trainer_mode.placement(config).rollout_pool:
        return []
    engine = OmegaConf.select(config, ENGINE)
    if engine is None:
        return []
    changes = []
    backend = engine.get("backend")
    if backend in DEVICE_ENGINES:
        raise CPUConfigError(
            f"{ENGINE}.backend={backend} moves weights between devices; on a CPU use gloo "
            f"({ENGINE}.backend=gloo, {ENGINE}.custom_backend_module={GLOO_MODULE}) or leave it unset"
        )
    if backend in (None, "naive"):
        engine["backend"] = "gloo"
        changes.append(f"{ENGINE}.backend: {backend} -> gloo (separate trainer and rollout processes)")
    if engine["backend"] == "gloo":
        if not engine.get("custom_backend_module"):
            engine["custom_backend_module"] = GLOO_MODULE
            changes.append(f"{ENGINE}.custom_backend_module: unset -> {GLOO_MODULE} (registers the gloo engine)")
        _check_gloo_kwargs(engine)
    rollout = config.actor_rollout_ref.rollout
    for key in ("nnodes", "n_gpus_per_node"):
        if not rollout.get(key):
            changes.append(f"actor_rollout_ref.rollout.{key}: {rollout.get(key)} -> 1 (the rollout pool: one slot)")
            rollout[key] = 1
    return changes


def _check_gloo_kwargs(engine) -> None:
    """Before Ray: what the engine would refuse inside a worker, after the cluster started (its declaration)."""
    from verl.cpu.engine_options import GlooEngineOptions

    problems = GlooEngineOptions.problems({"actor_rollout_ref": {"rollout": {"checkpoint_engine": engine}}})
    if problems:
        raise CPUConfigError("; ".join(problems))


def _rollout_pool_slots(config: DictConfig) -> int:
    """Logical GPU slots of separate_async's rollout pool (0 in every other mode)."""
    if not trainer_mode.placement(config).rollout_pool:
        return 0
    rollout = config.actor_rollout_ref.rollout
    return int(rollout.get("nnodes") or 0) * int(rollout.get("n_gpus_per_node") or 0)


def _is_interpolation(config: DictConfig, key: str) -> bool:
    parent, leaf = key.rsplit(".", 1)
    return OmegaConf.is_interpolation(OmegaConf.select(config, parent), leaf)


def _ray_slots(config: DictConfig) -> list[str]:
    """Logical Ray slots for a driver-local cluster: one ``GPU`` per rank, enough ``CPU`` tokens."""
    ray_init = OmegaConf.select(config, "ray_kwargs.ray_init")
    if ray_init is None or _connects_to_cluster(ray_init):
        return []  # an existing cluster: its nodes declared their slots at `ray start`
    ranks = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    pool = _rollout_pool_slots(config)  # its bundles hold CPU slots as the training ranks' do
    needed = cpu_slots_needed(config, ranks + pool)
    changes = _worker_threads(ray_init)
    if ray_init.get("num_gpus") is None:
        ray_init["num_gpus"] = ranks + pool
        changes.append(f"ray_kwargs.ray_init.num_gpus: unset -> {ranks + pool} (logical slots, one per training rank"
                       + (f", {pool} for the rollout pool)" if pool else ")"))
    if ray_init.get("num_cpus") is None:
        ray_init["num_cpus"] = max(needed, os.cpu_count() or 1)
        changes.append(
            f"ray_kwargs.ray_init.num_cpus: unset -> {ray_init['num_cpus']} (logical slots: "
            f"{CPU_SLOTS_PER_RANK} per training rank, TransferQueue's actors, one to schedule with)"
        )
    elif int(ray_init["num_cpus"]) < needed:
        raise CPUConfigError(
            f"ray_kwargs.ray_init.num_cpus={ray_init['num_cpus']} is too small: this run holds {needed} logical "
            f"CPU slots at once ({CPU_SLOTS_PER_RANK} per training rank x {ranks}, TransferQueue's controller and "
            f"storage units, one to schedule with) and would wait forever; set it to at least {needed} "
            f"(they are scheduling tokens, not cores) or leave it unset"
        )
    return changes


# Thread counts per worker process, and why. OMP_NUM_THREADS: a dozen processes share the cores,
# and torch's spinning thread pools make small matmuls far slower under that contention.
# TQ_NUM_THREADS: TransferQueue raises torch's thread count to it around every put and get
# (default 8) and, on a machine with fewer cores, logs a warning each time (hundreds a step).
WORKER_THREADS = {"OMP_NUM_THREADS": "1", "TQ_NUM_THREADS": "1"}


def _worker_threads(ray_init) -> list[str]:
    """``WORKER_THREADS`` into the workers' environment, where neither the driver nor the config set them."""
    runtime_env = ray_init.get("runtime_env") or {}
    env_vars = dict(runtime_env.get("env_vars") or {})
    changes = []
    for name, value in WORKER_THREADS.items():
        if name in os.environ or name in env_vars:
            continue  # Ray passes the driver's value on to its workers; the config's wins anyway
        env_vars[name] = value
        changes.append(f"ray_kwargs.ray_init.runtime_env.env_vars.{name}: unset -> {value} (processes share the cores)")
    if changes:
        ray_init["runtime_env"] = {**runtime_env, "env_vars": env_vars}
    return changes


def cpu_slots_needed(config: DictConfig, ranks: int) -> int:
    """CPU slots held at once: placement-group bundles, TransferQueue actors (num_cpus=1 each), +1."""
    storage_units = OmegaConf.select(config, "transfer_queue.backend.SimpleStorage.num_data_storage_units", default=0)
    return CPU_SLOTS_PER_RANK * ranks + 1 + int(storage_units or 0) + 1


def _connects_to_cluster(ray_init) -> bool:
    address = ray_init.get("address") or os.environ.get("RAY_ADDRESS")
    return address not in (None, "", "local")
