"""The CPU backend's hooks into upstream verl, applied lazily when their target is imported.

Each entry is a seam row of this backend (``verl/cpu/seams.py``: target, fingerprints, removal
condition); why it exists is said here. ``tests/cpu/test_patches.py`` fails when a target changes.

Registrations (upstream extension points, not patches):
- ``hf`` in ``RolloutReplicaRegistry`` and in the worker-side ``_ROLLOUT_REGISTRY``.
- upstream's FSDP engine classes registered for ``device="cpu"`` in ``EngineRegistry``
  (upstream registers them for ``cuda`` and ``npu`` only; the code is device-agnostic).
Seam ``cpu_backend_registrations``: the adapter table has no register function and
``EngineRegistry.register`` raises on a second registration, so its private dict is read to stay
idempotent; it goes when upstream has a public ``register_rollout(name, mode, fqn)`` and an
idempotent engine registration.

Patch:
- ``verl.utils.distributed.initialize_global_process_group_ray`` builds the backend string
  ``f"cpu:gloo,{device}:{backend}"``, which is ``"cpu:gloo,cpu:gloo"`` on the CPU platform and
  makes ``torch.distributed`` raise "Duplicate device type cpu". On the CPU platform the
  wrapper passes ``backend="cpu:gloo"``; elsewhere it calls the original unchanged. Seam
  ``cpu_process_group_backend``; goes when upstream builds the string without duplicating ``cpu``.
- ``verl.utils.device.auto_set_device`` (what ``python -m verl.trainer.main_ppo`` calls first, in
  the driver, before validation and Ray) leaves the config alone when the platform is ``cpu``.
  On the CPU platform the wrapper then refuses a rollout engine that is unset or not installed
  (``verl_ascend.checks.rules_engine``), fills in what a CPU run needs (``verl.cpu.config_defaults``),
  or exits with status 2 naming a setting that cannot work. Installed only in the driver of
  upstream's entry point (``__main__`` is ``verl.trainer.main_ppo``): Ray workers and the recipe,
  whose configs say all of this themselves, keep upstream's function. Every change is logged as
  ``[verl.cpu] <key>: <old> -> <new>``. Seam ``cpu_auto_set_device``; goes when upstream platforms can
  adjust the trainer config themselves (a ``PlatformBase.update_config(config)`` called by
  ``auto_set_device``).

- ``verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu`` (the π_old snapshot of separate_async with old
  log-probs recomputed) returns shards that alias the live weights on a CPU: the wrapper copies them
  (``verl.cpu.snapshots``, seam ``cpu_sharded_snapshot_copies``).

The hooks into upstream's vLLM rollout (for vLLM's CPU build) live in ``verl.cpu.vllm_hooks``.
"""

from __future__ import annotations

import functools
import sys

from verl.cpu import snapshots, vllm_hooks
from verl_ascend.seams.post_import import main_module, when_imported

ROLLOUT_NAME = "hf"
ADAPTER_FQN = "verl.cpu.rollout.adapter.HFServerAdapter"


def _on_cpu() -> bool:
    from verl.plugin.platform import get_platform

    return get_platform().device_name == "cpu"


def _load_hf_replica():
    from verl.cpu.rollout.replica import HFReplica

    return HFReplica


def register_rollout_replica(module) -> None:
    module.RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_hf_replica)


def register_rollout_adapter(module) -> None:
    module._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER_FQN


def register_fsdp_engines_for_cpu(module) -> None:
    from verl.workers.engine.base import EngineRegistry

    engines = EngineRegistry._engines
    for model_type, cls in (
        ("language_model", module.FSDPEngineWithLMHead),
        ("value_model", module.FSDPEngineWithValueHead),
    ):
        if "cpu" not in engines.get(model_type, {}).get("fsdp", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(cls)


def patch_process_group_backend(module) -> None:
    original = module.initialize_global_process_group_ray
    if getattr(original, "__verl_cpu_patched__", False):
        return

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None and _on_cpu():
            backend = "cpu:gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray.__verl_cpu_patched__ = True
    module.initialize_global_process_group_ray = initialize_global_process_group_ray


def patch_auto_set_device(module) -> None:
    original = module.auto_set_device
    if getattr(original, "__verl_cpu_patched__", False):
        return

    @functools.wraps(original)
    def auto_set_device(config) -> None:
        original(config)
        if config is None or not _on_cpu():
            return
        from verl.cpu import config_defaults
        from verl_ascend.checks import exits
        from verl_ascend.checks.rules_engine import refuse_in_driver

        refuse_in_driver(config, "[verl.cpu]")  # rollout.name unset, its engine missing: exit 2 before Ray
        try:
            config_defaults.apply(config)
        except config_defaults.CPUConfigError as exc:
            print(f"[verl.cpu] error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(exits.REFUSED) from exc

    auto_set_device.__verl_cpu_patched__ = True
    module.auto_set_device = auto_set_device


def install() -> None:
    """Arm every hook; each runs once, when (or if) its target module is imported."""
    when_imported("verl.workers.rollout.replica", register_rollout_replica)
    when_imported("verl.workers.rollout.base", register_rollout_adapter)
    when_imported("verl.workers.engine.fsdp.transformer_impl", register_fsdp_engines_for_cpu)
    when_imported("verl.utils.distributed", patch_process_group_backend)
    when_imported("verl.utils.fsdp_utils", snapshots.patch_sharded_save)
    vllm_hooks.install()
    if main_module() in ENTRY_POINTS:
        when_imported("verl.utils.device", patch_auto_set_device)


ENTRY_POINTS = ("verl.trainer.main_ppo",)

