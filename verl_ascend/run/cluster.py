"""Run on an existing Ray cluster (``ray start`` on each node) instead of a driver-local one.

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
