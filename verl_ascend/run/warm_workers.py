"""Warm Ray workers: start the driver-local Ray cluster with worker processes that import verl ahead of the actors.

Why: upstream creates its actors one after another -- TaskRunner, TransferQueue controller and
storage, the worker group, the rollout server, the load balancer, the agent-loop workers -- and
each starts in a new Ray worker process that first spends 5-8 s of one core importing torch,
tensordict, transformers and verl. On the 2-core demo machine that is most of the start-up and of
the first step, with the second core idle (``docs/ascend_tutorial/cpu_demo.md`` §1).

How (``trainer.v1.dapo_ascend.warm_workers: N``):

* Ray starts up to ``worker_maximum_startup_concurrency`` idle workers when its node starts, and
  ``preload_python_modules`` makes every worker import those modules before it takes work. With
  ``N`` of each, ``N`` workers import verl side by side, on every core, while the driver and the
  TaskRunner go on; each later actor is handed one that is ready.
* Ray hands an idle worker only to an actor of the same runtime environment, and its idle
  workers have none. So this module starts the cluster itself, with the environment variables
  upstream's ``run_ppo`` would put in the job's ``runtime_env`` (``get_ppo_ray_runtime_env``, the
  TransferQueue switch, ``ray_kwargs.ray_init.runtime_env``) exported into the driver's own
  environment instead: the workers of a cluster the driver starts inherit it. ``run_ppo`` then
  finds Ray running and skips its own ``ray.init``.
* Only for a cluster this driver starts (no ``address``), only when the runtime env holds nothing
  but environment variables, and never on an NPU (its environment profile rides ``runtime_env``).
  Anything else: a printed note, and upstream starts Ray as usual.
* Actors created with an environment of their own (upstream's worker group sets per-rank
  variables) always get a new process, and a worker that ran a Ray *task* (upstream runs one to
  pick the worker group's master port) is not given to an actor: count one worker for that task.

Seam ``driver_warm_ray_workers``: on with ``trainer.v1.dapo_ascend.warm_workers > 0`` (dapo_demo_cpu: 7; 0 in
dapo_base), driver-local Ray, CPU; goes when upstream's ``run_ppo`` prestarts workers that preload verl, or
starts its actors side by side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

KEY = "trainer.v1.dapo_ascend.warm_workers"
# Each warm worker is a process holding verl imported: 495 MiB resident, measured (`import verl`,
# maxrss). A driver-local run creates a few dozen actors at most (TaskRunner, TransferQueue, one
# per training rank and rollout server, the agent-loop workers), so more than 64 only adds idle
# processes: 64 of them already hold about 31 GiB.
MAX_WARM_WORKERS = 64
PRELOAD = ("verl",)  # what every actor of the run imports first; the rest is a few seconds each


@dataclass
class WarmPlan:
    """What :func:`start` would do: ``init_kwargs`` for ``ray.init``, ``env_vars`` for the driver's environment."""

    count: int
    init_kwargs: dict = field(default_factory=dict)
    env_vars: dict = field(default_factory=dict)
    skipped: Optional[str] = None  # why upstream starts Ray instead; None: this plan applies


def job_runtime_env(config: Any) -> dict:
    """The ``runtime_env`` upstream's ``run_ppo`` passes to ``ray.init`` (same sources, same order)."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    default = get_ppo_ray_runtime_env(config)
    if config.transfer_queue.enable:
        default.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
    given = config.ray_kwargs.get("ray_init", {}).get("runtime_env", {}) or {}
    return OmegaConf.to_container(OmegaConf.merge(default, given), resolve=True)


def _set_by_run_ppo(config: Any) -> Optional[str]:
    """The settings for which ``run_ppo`` exports variables just before its own ``ray.init`` (too late here)."""
    if config.actor_rollout_ref.rollout.get("full_determinism", False):
        return "actor_rollout_ref.rollout.full_determinism"
    reward_model = config.reward.reward_model
    if reward_model.get("enable", False) and reward_model.rollout.get("full_determinism", False):
        return "reward.reward_model.rollout.full_determinism"
    loggers = config.trainer.get("logger", []) or []
    if "rl_insight" in ([loggers] if isinstance(loggers, str) else list(loggers)):
        return "trainer.logger rl_insight"
    return None


def plan(config: Any, count: int) -> WarmPlan:
    from omegaconf import OmegaConf

    from verl_ascend.run.cluster import cluster_address

    if count <= 0:
        return WarmPlan(count, skipped=f"{KEY}={count}")
    if config.trainer.device == "npu":
        return WarmPlan(count, skipped="device=npu: the NPU environment profile is delivered through runtime_env")
    late = _set_by_run_ppo(config)
    if late:
        return WarmPlan(count, skipped=f"{late}: upstream's run_ppo sets worker environment variables for it after this point")
    address = cluster_address(config)
    if address is not None:
        return WarmPlan(count, skipped=f"the run joins the existing Ray cluster at {address}")
    runtime_env = job_runtime_env(config)
    env_vars = {str(k): str(v) for k, v in (runtime_env.pop("env_vars", None) or {}).items()}
    others = sorted(k for k, v in runtime_env.items() if v not in (None, {}, [], ""))
    if others:
        return WarmPlan(count, skipped=f"ray_kwargs.ray_init.runtime_env sets {others}, which only Ray can deliver")
    ray_init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}) or {}, resolve=True)
    init_kwargs = {k: v for k, v in ray_init.items() if k != "runtime_env"}
    system = dict(init_kwargs.get("_system_config") or {})
    system.setdefault("preload_python_modules", list(PRELOAD))
    system.setdefault("worker_maximum_startup_concurrency", int(count))
    init_kwargs["_system_config"] = system
    return WarmPlan(count, init_kwargs=init_kwargs, env_vars=env_vars)


def start(config: Any, count: int) -> WarmPlan:
    """Start the local Ray cluster with ``count`` warm workers, or say why not; returns the plan."""
    import ray

    from verl_ascend.run.cluster import start_ray

    if ray.is_initialized():
        return WarmPlan(count, skipped="Ray is already running in this process")
    warm = plan(config, count)
    if warm.skipped is not None:
        if count > 0:
            print(f"[verl-ascend] {KEY}: not applied ({warm.skipped}); upstream starts Ray", flush=True)
        return warm
    os.environ.update(warm.env_vars)
    print(
        f"[verl-ascend] {KEY}: {count} Ray workers import {', '.join(PRELOAD)} while the run starts "
        f"(ray.init {sorted(warm.init_kwargs)}; {len(warm.env_vars)} worker environment variables)",
        flush=True,
    )
    start_ray(lambda: ray.init(**warm.init_kwargs))
    return warm
