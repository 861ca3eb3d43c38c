"""What the cluster check needs to know about the job, read once from the composed config on the driver.

Why a plain dataclass and not the config: it travels to one Ray task per node (picklable, small), and the
probes on the nodes must read the job exactly as the driver resolved it (interpolations such as
``${oc.env:VERL_ASCEND_OUTPUT_DIR}`` resolve on the driver, as they do when the job starts).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

# The variables that decide how ranks on different nodes find each other and what the device runtime does:
# the communication libraries' own (HCCL_*, GLOO_*, NCCL_*, TP_SOCKET_IFNAME), Ascend's runtime (ASCEND_*,
# TASK_QUEUE_ENABLE, PYTORCH_NPU_*), vLLM's switches and Ray's NOSET switch. Set in the driver's shell,
# each must reach every node (a node started with `ray start` keeps its own environment).
SHARED_PREFIXES = ("HCCL_", "GLOO_", "NCCL_", "TP_SOCKET_IFNAME", "ASCEND_", "TASK_QUEUE_ENABLE", "PYTORCH_NPU_",
                   "CPU_AFFINITY_CONF", "VLLM_", "RAY_EXPERIMENTAL_NOSET_")
# Compared between nodes too: verl's and verl-ascend's switches (VERL_*), which the driver's shell may hold
# for the driver alone (DRY_RUN-like switches, paths) but which must not differ from node to node.
WATCHED_PREFIXES = (*SHARED_PREFIXES, "VERL_")
# Set per node or per process on purpose (each node's own cards, the launching shell's own files):
# compared by the devices check or not at all.
PER_NODE = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "ASCEND_PROCESS_LOG_PATH", "VERL_ASCEND_OUTPUT_DIR",
            "VERL_FILE_LOGGER_PATH")
TOKEN_PREFIX = ".verl-ascend-cluster-"  # the shared-folder token files, removed by the check itself


def watched(name: str) -> bool:
    """Compared between nodes."""
    return name.startswith(WATCHED_PREFIXES) and name not in PER_NODE


def shared(name: str) -> bool:
    """Set in the driver's shell, expected on every node."""
    return name.startswith(SHARED_PREFIXES) and name not in PER_NODE


@dataclass(frozen=True)
class Job:
    """The job as the cluster check probes it (see :func:`from_config`)."""

    device: str  # trainer.device
    nnodes: int  # nodes the job places ranks on (trainer.nnodes, + the rollout pool's in separate_async)
    gpus_per_node: int  # trainer.n_gpus_per_node
    runtime_env: dict  # what every worker of the job receives: ray_kwargs.ray_init.runtime_env, device's delivered
    driver_env: dict  # the driver's shared variables (shared()), expected on each node
    model_paths: tuple[str, ...]  # local model folders (actor model, tokenizer when separate)
    data_files: tuple[str, ...]  # data.train_files + data.val_files (local paths)
    checkpoint_dir: str  # trainer.default_local_dir, absolute
    checkpoint_bytes: int | None  # one checkpoint, estimated from the model (run_guard.checkpoint_bytes)
    host_bytes: int | None  # host memory per node the offloaded states need (None: nothing offloaded)
    host_bytes_why: str = ""
    check_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def exported(self) -> dict:
        return dict(self.runtime_env.get("env_vars") or {})


def _paths(value) -> list[str]:
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else [value]
    return [str(v) for v in items if v not in (None, "")]


def _local(path: str) -> bool:
    """A path a node reads from its own file system (not ``hdfs://``, not a hub id like ``Qwen/Qwen2.5-32B``)."""
    return "://" not in path and (os.path.isabs(os.path.expanduser(path)) or os.path.exists(path))


def job_nodes(config: DictConfig) -> int:
    """Nodes the job places ranks on: the trainer's, plus the standalone rollout pool's in ``separate_async``."""
    nnodes = int(OmegaConf.select(config, "trainer.nnodes", default=1) or 1)
    from verl_ascend import trainer_mode

    if trainer_mode.mode_of(config) == trainer_mode.SEPARATE:
        nnodes += int(OmegaConf.select(config, "actor_rollout_ref.rollout.nnodes", default=0) or 0)
    return nnodes


def from_config(config: DictConfig, environ) -> Job:
    """The job of a composed config whose device has prepared and delivered it (``DeviceHooks``)."""
    from verl_ascend.run.run_guard import checkpoint_bytes

    select = lambda key, default=None: OmegaConf.select(config, key, default=default)  # noqa: E731
    runtime_env = select("ray_kwargs.ray_init.runtime_env") or {}
    runtime_env = OmegaConf.to_container(runtime_env, resolve=True) if OmegaConf.is_config(runtime_env) else dict(runtime_env)
    runtime_env["env_vars"] = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
    model = [p for p in _paths(select("actor_rollout_ref.model.path")) if _local(p)]
    tokenizer = [p for p in _paths(select("actor_rollout_ref.model.tokenizer_path")) if _local(p) and p not in model]
    data = [p for p in _paths(select("data.train_files")) + _paths(select("data.val_files")) if _local(p)]
    try:
        ckpt = checkpoint_bytes(config) if model and os.path.isdir(os.path.expanduser(model[0])) else None
    except (OSError, ValueError):
        ckpt = None
    nnodes = job_nodes(config)
    host, why = host_bytes(config, ckpt_params(config, model), nnodes, environ)
    return Job(
        device=str(select("trainer.device", "cpu") or "cpu"),
        nnodes=nnodes,
        gpus_per_node=int(select("trainer.n_gpus_per_node", 1) or 1),
        runtime_env=runtime_env,
        driver_env={k: v for k, v in environ.items() if shared(k)},
        model_paths=tuple(os.path.abspath(os.path.expanduser(p)) for p in model + tokenizer),
        data_files=tuple(os.path.abspath(os.path.expanduser(p)) for p in data),
        checkpoint_dir=os.path.abspath(os.path.expanduser(str(select("trainer.default_local_dir", "checkpoints")))),
        checkpoint_bytes=ckpt,
        host_bytes=host,
        host_bytes_why=why,
    )


def ckpt_params(config: DictConfig, model: list[str]) -> int | None:
    from verl_ascend.run.run_guard import parameter_count

    folder = os.path.expanduser(model[0]) if model else ""
    return parameter_count(folder) if folder and os.path.isdir(folder) else None


def host_bytes(config: DictConfig, params: int | None, nnodes: int, environ=None) -> tuple[int | None, str]:
    """Host memory per node that the job's offloaded states take, and how it was reckoned.

    From the memory plan (``verl_ascend.memory``, the figure ``verl-ascend memory`` prints): its largest host set
    of any phase -- the actor's offloaded parameters and optimizer states, the slept rollout engine's weights --
    times the cards per node. Where no plan can be made for this config, FSDP offload's own count stands in,
    with the plan's reason: fp32 parameters (4 bytes each) with ``param_offload`` and Adam's two fp32 moments
    (8 bytes) with ``optimizer_offload``, spread over the job's nodes. None when nothing goes to the host."""
    planned, reason = planned_host(config, environ)
    if planned is not None:
        return (planned, "the memory plan's host set per node (verl-ascend memory --detail)") if planned else (None, "")
    actor = "actor_rollout_ref.actor.fsdp_config."
    param = bool(OmegaConf.select(config, actor + "param_offload", default=False))
    optim = bool(OmegaConf.select(config, actor + "optimizer_offload", default=False))
    if not (param or optim) or not params:
        return None, ""
    per_param = (4 if param else 0) + (8 if optim else 0)
    what = " and ".join(w for w, on in (("param_offload (4 B/param)", param), ("optimizer_offload (8 B/param)", optim)) if on)
    return params * per_param // max(nnodes, 1), f"{what} x {params:,} parameters / {nnodes} nodes; {reason}"


def planned_host(config: DictConfig, environ=None) -> tuple[int | None, str]:
    """(the memory plan's host bytes per node, "") or (None, why there is no plan)."""
    from verl_ascend.memory.options import MemoryOptions
    from verl_ascend.memory.plan import cached_plan

    try:
        if not MemoryOptions.from_config(config).check:
            return None, "memory.check=false: no memory plan"
        return cached_plan(config, environ).host_per_node, ""
    except Exception as exc:  # noqa: BLE001 -- the cell still judges with the estimate, and says why
        return None, f"no memory plan ({type(exc).__name__}: {exc})"
