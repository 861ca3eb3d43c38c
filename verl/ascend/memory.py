"""What an Ascend card holds, for the memory plan (``verl_ascend.memory``): one declaration per card.

- ``910b``: an Atlas A2 910B card has 64 GB of HBM, of which torch_npu can allocate about 61.3 GiB
  (``torch.npu.mem_get_info`` total on a 910B; the rest is the driver's and the runtime's); the
  article's job runs on it.
- ``a3``: one die of an Atlas A3 card, one device to torch, also 64 GB of HBM; the same runtime reserve
  is assumed until the first A3 host's acceptance run (``verl-ascend accept``) records it.
- KV block size 128: vllm-ascend v0.23.0 ``vllm_ascend/utils.py::refresh_block_size`` sets 128 when the
  user sets none (``actor_rollout_ref.rollout.engine_kwargs.vllm.block_size`` overrides it).
- HCCL: each communicator holds 2 x ``HCCL_BUFFSIZE`` MB (send and receive; CANN's environment-variable
  reference, default 200). HCCL reads the variable in each worker process, whose environment is the Ray
  runtime env (``ray_kwargs.ray_init.runtime_env.env_vars``) over the launching shell's; the env profile
  (``env/profile.yaml``) does not set it, so that is where it is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GIB = 1024**3
HCCL_BUFFSIZE_DEFAULT_MB = 200
BLOCK_SOURCE = "vllm-ascend v0.23.0 vllm_ascend/utils.py::refresh_block_size (128 unless set)"


def hccl_buffsize_mb(config: Any, environ: Mapping[str, str]) -> tuple[int, str]:
    """``HCCL_BUFFSIZE`` as a worker process receives it, and where it was read."""
    from omegaconf import OmegaConf

    job = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars.HCCL_BUFFSIZE", default=None)
    for value, name, where in ((job, "ray_kwargs.ray_init.runtime_env.env_vars.HCCL_BUFFSIZE", "the job's runtime env"),
                               (environ.get("HCCL_BUFFSIZE"), "HCCL_BUFFSIZE", "the launching environment")):
        if value not in (None, ""):
            try:
                mb = int(str(value))
            except ValueError:
                mb = 0
            if mb < 1:
                from verl_ascend.memory.terms import PlanInputError

                raise PlanInputError(f"{name}={value!r} ({where}): HCCL accepts an integer number of MB >= 1")
            return mb, f"{name} in {where}"
    return HCCL_BUFFSIZE_DEFAULT_MB, "CANN's default HCCL_BUFFSIZE (200 MB)"


def memory_devices(config: Any, environ: Mapping[str, str]) -> dict[str, Any]:
    from verl_ascend.memory.devices import DeviceMemory

    mb, where = hccl_buffsize_mb(config, environ)
    comm = dict(comm_buffer_bytes=2 * mb * 1024**2,
                comm_source=f"2 x HCCL_BUFFSIZE per communicator (CANN env reference); {mb} MB from {where}")
    return {
        "910b": DeviceMemory("Ascend 910B (A2)", int(61.3 * GIB), "torch_npu's visible memory of a 64 GB 910B",
                             128, BLOCK_SOURCE, **comm),
        "a3": DeviceMemory("Ascend A3 die", int(61.3 * GIB), "64 GB die, the 910B's runtime reserve assumed "
                           "until an A3 acceptance run records it", 128, BLOCK_SOURCE, **comm),
    }
