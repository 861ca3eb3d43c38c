"""Where Ray runs and how it is started: an existing cluster, or a driver-local one started with retries.

**Starting Ray** (:func:`start_ray`): every Ray start of this project -- the warm-workers path's own
``ray.init``, upstream's ``run_ppo`` (whose first act is its ``ray.init``), the tests' -- retries
Ray's start-up timeout (the node missed Ray's fixed 30 s wait, a busy machine) and, when it keeps
failing, ends the run with one message naming the cause (exit 1).

**Run on an existing Ray cluster** (``ray start`` on each node) instead of a driver-local one.

The recipe's configs size a driver-local cluster (``ray_kwargs.ray_init.num_cpus``/``num_gpus``,
logical slots on a CPU machine). Ray refuses those keys when connecting to a running cluster
("When connecting to an existing cluster, num_cpus and num_gpus must not be provided"). So when
the run is pointed at a cluster -- ``+ray_kwargs.ray_init.address=HOST:PORT`` or ``RAY_ADDRESS``
-- they are dropped here: the cluster's own nodes say what they have. Everything workers need
from the driver's environment goes through ``ray_kwargs.ray_init.runtime_env.env_vars`` (nodes
started with ``ray start`` never see the driver's environment).
"""

from __future__ import annotations

import os
import sys

from omegaconf import DictConfig, open_dict

LOCAL_ONLY_KEYS = ("num_cpus", "num_gpus", "resources", "object_store_memory", "labels")


def cluster_address(config: DictConfig) -> str | None:
    ray_init = config.get("ray_kwargs", {}).get("ray_init", {}) or {}
    address = ray_init.get("address") or os.environ.get("RAY_ADDRESS") or None
    if address in (None, "", "local"):
        return None
    return str(address)


def adapt_ray_init(config: DictConfig) -> str | None:
    """Drop the local-cluster sizing keys when an existing cluster is addressed; returns the address."""
    address = cluster_address(config)
    if address is None:
        return None
    ray_init = config.ray_kwargs.ray_init
    dropped = []
    with open_dict(config):
        for key in LOCAL_ONLY_KEYS:
            if ray_init.get(key) is not None:
                dropped.append(f"{key}={ray_init.get(key)}")
                ray_init[key] = None
    note = f" (ignoring local-cluster sizing {', '.join(dropped)})" if dropped else ""
    print(f"[verl-ascend] ray: connecting to the existing cluster at {address}{note}", flush=True)
    return address


# ----------------------------------------------------------------------------- starting Ray
# Ray waits a fixed 30 s for a node it starts (ray/_private/node.py); on a busy machine the raylet
# can miss it. Nothing of the run exists yet when it does, so a fresh attempt is safe.
START_ATTEMPTS = 3
START_TIMEOUT = "timed out during startup"


def is_startup_timeout(exc: BaseException) -> bool:
    return START_TIMEOUT in str(exc)


def start_failed(exc: BaseException, attempts: int):
    """The one message for a Ray start that kept timing out (a ``lifetime.RunEnded``, exit 1)."""
    from verl_ascend.run.faults import rerun_command
    from verl_ascend.run.lifetime import RunEnded

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RunEnded(
        f"[verl-ascend] error: Ray's local node did not start within Ray's fixed start-up wait, {attempts} attempts "
        f"({first!r}; load average {load} on {os.cpu_count()} cores): the machine is too busy. Nothing was "
        f"trained. Rerun when the load is lower: {rerun_command()}",
        1,
    )


def start_ray(start, *, reached=lambda: False, attempts: int = START_ATTEMPTS, pause=None, shutdown=None):
    """``start()`` (a ``ray.init``, or upstream's ``run_ppo`` whose first act it is), retried while it
    fails with Ray's start-up timeout before ``reached()`` says Ray is up; then one clear ending."""
    import time

    pause = pause or time.sleep
    if shutdown is None:
        import ray

        shutdown = ray.shutdown
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception as exc:  # Ray raises a bare Exception for this
            if reached() or not is_startup_timeout(exc):
                raise
            shutdown()
            if attempt == attempts:
                raise start_failed(exc, attempts) from exc
            print(f"[verl-ascend] ray: the local node timed out during startup (attempt {attempt} of {attempts}); "
                  "starting it again", file=sys.stderr, flush=True)
            pause(5 * attempt)
