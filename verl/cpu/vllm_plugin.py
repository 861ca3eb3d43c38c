"""``vllm.general_plugins`` entry point of the CPU backend, loaded at the start of every vLLM process.

vLLM loads general plugins in each of its processes (the one that builds the engine client,
the engine core, every worker), including the ones upstream's vLLM rollout server spawns.
What it does there:

1. leaves a trace: it appends its pid to ``VERL_CPU_VLLM_PLUGIN_PIDS``, which child processes
   inherit, so a worker can tell which processes of its lineage loaded it (``ran_in``);
2. checks that the rollout role's environment arrived: the CPU platform's ``rollout_env_vars``
   (upstream passes them into the rollout server's Ray runtime env) name themselves in
   ``VERL_CPU_ROLLOUT_ENV``; any listed variable missing in this process is warned about.

It imports nothing heavy and does nothing else, so it is harmless in a vLLM process that verl
did not start.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("verl.cpu.vllm_plugin")

PIDS_ENV = "VERL_CPU_VLLM_PLUGIN_PIDS"
LISTED_ENV = "VERL_CPU_ROLLOUT_ENV"
# vLLM's CPU engine settings for the rollout role; the process env wins over these defaults.
# VLLM_CPU_KVCACHE_SPACE (GiB): vLLM's own default sizes the KV cache for a dedicated server;
# 1 GiB holds the tiny recipes' caches many times over and leaves a shared machine its memory.
ROLLOUT_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def rollout_env() -> dict[str, str]:
    """The rollout role's environment for vLLM's CPU build, naming itself in ``VERL_CPU_ROLLOUT_ENV``."""
    env = {key: os.environ.get(key, default) for key, default in ROLLOUT_DEFAULTS.items()}
    env[LISTED_ENV] = ",".join(sorted(env))
    return env


def ran_in() -> list[int]:
    """Pids of this process and its ancestors in which this plugin ran."""
    return [int(pid) for pid in os.environ.get(PIDS_ENV, "").split(",") if pid]


def missing_rollout_env() -> list[str]:
    listed = [key for key in os.environ.get(LISTED_ENV, "").split(",") if key]
    return [key for key in listed if key not in os.environ]


def register() -> None:
    pids = ran_in()
    if os.getpid() not in pids:
        os.environ[PIDS_ENV] = ",".join(str(pid) for pid in [*pids, os.getpid()])
    missing = missing_rollout_env()
    if missing:
        logger.warning("vLLM process %d: rollout env variables did not arrive: %s", os.getpid(), ", ".join(missing))
