"""The Ascend backend's own environment variables, declared next to its code.

Registered in the entry-point group ``verl_ascend.envs`` (setup.py) and assembled by the toolkit's
registry (``verl_ascend/envs.py``: the lookups, the one boolean parser, ``verl-ascend envs``).
This module imports nothing but that registry's row type, so the assembly runs none of the backend.
The NPU runtime's own variables (HCCL_*, TASK_QUEUE_ENABLE, ...) are the env profile's
(``env/profile.yaml``), not rows here.
"""

from __future__ import annotations

from verl_ascend.envs import EnvVar

# One per fused-op switch (``ascend.fused_ops.<key>``, ``ops/switches.py``), which reads them by this key.
FUSED_OPS: dict[str, EnvVar] = {
    "enable": EnvVar("VERL_ASCEND_FUSED_OPS", "bool", None, "verl/ascend/ops/switches.py",
                     "All fused ops on/off in training workers; set from ascend.fused_ops.enable by the env profile."),
    "rms_norm": EnvVar("VERL_ASCEND_FUSED_RMS_NORM", "bool", None, "verl/ascend/ops/switches.py",
                       "Fused RMSNorm; from ascend.fused_ops.rms_norm through the env profile."),
    "swiglu": EnvVar("VERL_ASCEND_FUSED_SWIGLU", "bool", None, "verl/ascend/ops/switches.py",
                     "Fused SwiGLU; from ascend.fused_ops.swiglu through the env profile."),
    "rotary_mul": EnvVar("VERL_ASCEND_FUSED_ROTARY_MUL", "bool", None, "verl/ascend/ops/switches.py",
                         "Fused rotary embedding; from ascend.fused_ops.rotary_mul through the env profile."),
}

VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("VERL_ASCEND_NPU_EMULATOR", "bool", "0", "verl/ascend/emulator/__init__.py",
           "Run the Ascend backend on a CPU through the torch_npu emulator (tests; never on real NPUs)."),
    EnvVar("VERL_ASCEND_EMULATOR_DEVICES", "int", "8", "verl/ascend/emulator/device.py",
           "How many NPUs the emulator pretends to have."),
    *FUSED_OPS.values(),
    EnvVar("VERL_ASCEND_TARGET_VLLM_ASCEND", "str", None, "verl/ascend/env/stack.py",
           "The vllm-ascend version the job will run on (else ascend.stack.vllm_ascend, else the installed one)."),
    EnvVar("VERL_ASCEND_TARGET_VLLM", "str", None, "verl/ascend/env/stack.py",
           "The vLLM version the job will run on (else ascend.stack.vllm, else the installed one)."),
    # -- wire formats between our own processes (set by us, read by us) ---------------------------
    EnvVar("VERL_ASCEND_ENV_PROFILE", "wire", None, "verl/ascend/env/wire.py",
           "The whole Ascend env profile (JSON) for the processes Ray starts, roles included."),
    EnvVar("VERL_ASCEND_FUSED_OP_COUNTS", "wire", None, "verl/ascend/ops/counts.py",
           "Where each process writes how often the patched forwards ran their fused kernels (acceptance run)."),
    EnvVar("VERL_ASCEND_VLLM_ENV_REPORT", "wire", None, "verl/ascend/env/vllm_plugin.py",
           "Where each vLLM process writes the profile variables it received (acceptance run)."),
)
