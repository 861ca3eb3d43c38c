"""The CPU backend's own environment variables, declared next to its code.

Registered in the entry-point group ``verl_ascend.envs`` (setup.py) and assembled by the toolkit's
registry (``verl_ascend/envs.py``: the lookups, the one boolean parser, ``verl-ascend envs``).
This module imports nothing but that registry's row type, so the assembly runs none of the backend.
"""

from __future__ import annotations

from verl_ascend.envs import EnvVar

VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("VERL_HF_ROLLOUT_THREADS", "int", "1", "verl/cpu/rollout/server.py",
           "torch threads of the CPU `hf` rollout server."),
    EnvVar("VERL_HF_ROLLOUT_BATCH_WAIT_MS", "float", "5", "verl/cpu/rollout/server.py",
           "How long the `hf` rollout server waits to batch concurrent requests."),
    # -- wire formats between our own processes (set by us, read by us) ---------------------------
    EnvVar("VERL_CPU_ROLLOUT_ENV", "wire", None, "verl/cpu/vllm_plugin.py",
           "Names of the variables the CPU rollout role must see inside vLLM processes (checked on arrival)."),
    EnvVar("VERL_CPU_VLLM_PLUGIN_PIDS", "wire", None, "verl/cpu/vllm_plugin.py",
           "Where vLLM processes record that this distribution's vLLM plugin ran (tests)."),
    EnvVar("VERL_CPU_VLLM_PROBE_DIR", "wire", None, "verl/cpu/rollout/vllm_worker.py",
           "Where each vLLM worker writes what it saw (tests)."),
)
