"""THE registry of this distribution's own environment variables, and the one way to read them.

The NPU runtime's variables (HCCL_*, TASK_QUEUE_ENABLE, ...) are decided by the Ascend env profile
(``verl/ascend/env/profile.yaml``, with roles, conflicts and reasons); this table is for the
variables *we* define: switches, paths and the wire formats between our own processes. Every name
read anywhere in this distribution is a row here (``tests/verl_ascend/test_envs.py`` scans the code), every
boolean goes through :func:`parse_bool`, so ``DRY_RUN=no`` and ``VERL_ASCEND_DOCTOR=off`` mean what
they say everywhere, and an unreadable value names the variable and what would be accepted.

``python -m verl_ascend.envs`` prints the table with the values set in this shell.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Mapping

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


class EnvValueError(ValueError):
    """An environment variable of ours holds a value we cannot read."""


@dataclass(frozen=True)
class EnvVar:
    name: str
    kind: str  # "bool" | "int" | "float" | "path" | "str" | "wire" (written by us for our own processes)
    default: str | None
    read_by: str  # the home that reads it
    doc: str


VARIABLES: tuple[EnvVar, ...] = (
    # -- user switches ----------------------------------------------------------------------------
    EnvVar("DRY_RUN", "bool", "0", "recipe/dapo_ascend/main_dapo.py",
           "Compose the job, print the effective settings and the checks' verdict, exit without starting Ray."),
    EnvVar("VERL_ASCEND_DOCTOR", "bool", "1", "recipe/dapo_ascend/main_dapo.py",
           "Run the checks before a job starts (0 skips them; refusals of preflight still apply)."),
    EnvVar("VERL_ASCEND_DOCTOR_STRICT", "bool", "0", "checks",
           "Treat the checks' warnings as errors (refuse the start)."),
    EnvVar("VERL_ASCEND_DOCTOR_IGNORE", "str", "", "checks",
           "Comma-separated rule ids whose findings are not reported."),
    EnvVar("VERL_ASCEND_NPU_EMULATOR", "bool", "0", "verl/ascend/emulator",
           "Run the Ascend backend on a CPU through the torch_npu emulator (tests; never on real NPUs)."),
    EnvVar("VERL_ASCEND_EMULATOR_DEVICES", "int", "8", "verl/ascend/emulator/device.py",
           "How many NPUs the emulator pretends to have."),
    EnvVar("VERL_ASCEND_FUSED_OPS", "bool", None, "verl/ascend/ops/switches.py",
           "All fused ops on/off in training workers; set from ascend.fused_ops.enable by the env profile."),
    EnvVar("VERL_ASCEND_FUSED_RMS_NORM", "bool", None, "verl/ascend/ops/switches.py",
           "Fused RMSNorm; from ascend.fused_ops.rms_norm through the env profile."),
    EnvVar("VERL_ASCEND_FUSED_SWIGLU", "bool", None, "verl/ascend/ops/switches.py",
           "Fused SwiGLU; from ascend.fused_ops.swiglu through the env profile."),
    EnvVar("VERL_ASCEND_FUSED_ROTARY_MUL", "bool", None, "verl/ascend/ops/switches.py",
           "Fused rotary embedding; from ascend.fused_ops.rotary_mul through the env profile."),
    EnvVar("VERL_ASCEND_TARGET_VLLM_ASCEND", "str", None, "verl/ascend/env/stack.py",
           "The vllm-ascend version the job will run on (else ascend.stack.vllm_ascend, else the installed one)."),
    EnvVar("VERL_ASCEND_TARGET_VLLM", "str", None, "verl/ascend/env/stack.py",
           "The vLLM version the job will run on (else ascend.stack.vllm, else the installed one)."),
    EnvVar("VERL_HF_ROLLOUT_THREADS", "int", "1", "verl/cpu/rollout/server.py",
           "torch threads of the CPU `hf` rollout server."),
    EnvVar("VERL_HF_ROLLOUT_BATCH_WAIT_MS", "float", "5", "verl/cpu/rollout/server.py",
           "How long the `hf` rollout server waits to batch concurrent requests."),
    # -- paths ------------------------------------------------------------------------------------
    EnvVar("VERL_ASCEND_OUTPUT_DIR", "path", "outputs", "recipe, run",
           "Root of a run's files: <dir>/<experiment>/metrics.jsonl, checkpoints, profiles."),
    EnvVar("VERL_ASCEND_TINY_DIR", "path", "~/.cache/verl-ascend/tiny", "recipe/dapo_ascend/tiny/assets.py",
           "Where the embedded default's tiny model, tokenizer and data are generated and cached."),
    EnvVar("VERL_ASCEND_NODE_REPORT_DIR", "path", None, "run/node_report.py",
           "Where each node writes its placement/env report (two-node diagnostics)."),
    EnvVar("VERL_ASCEND_PROFILE_DIR", "path", None, "recipe/dapo_ascend/config/profile",
           "global_profiler.save_path of the profile configs (else <VERL_ASCEND_OUTPUT_DIR>/profile/<experiment>)."),
    # -- wire formats between our own processes (set by us, read by us) ---------------------------
    EnvVar("VERL_ASCEND_RUN_DIR", "wire", None, "run",
           "The run's folder, exported by the driver to the trainer process."),
    EnvVar("VERL_ASCEND_METRICS_APPEND", "wire", None, "run",
           "Set by the driver when a resumed run must append to (not truncate) metrics.jsonl."),
    EnvVar("VERL_ASCEND_FRESH_DATA_ORDER", "wire", None, "run/data_order.py",
           "Set by the driver (1) when fault_tolerance.new_data_order starts a fresh data order on resume."),
    EnvVar("VERL_ASCEND_RUN_TOKEN", "wire", None, "run/guardian.py",
           "Set by the driver before Ray starts, fresh per run: marks every process of the run, which its guardian "
           "kills when the driver dies."),
    EnvVar("VERL_ASCEND_ENV_PROFILE", "wire", None, "verl/ascend/env/wire.py",
           "The whole Ascend env profile (JSON) for the processes Ray starts, roles included."),
    EnvVar("VERL_ASCEND_FUSED_OP_COUNTS", "wire", None, "verl/ascend/ops/counts.py",
           "Where each process writes how often the patched forwards ran their fused kernels (acceptance run)."),
    EnvVar("VERL_ASCEND_VLLM_ENV_REPORT", "wire", None, "verl/ascend/env/vllm_plugin.py",
           "Where each vLLM process writes the profile variables it received (acceptance run)."),
    EnvVar("VERL_CPU_ROLLOUT_ENV", "wire", None, "verl/cpu/vllm_plugin.py",
           "Names of the variables the CPU rollout role must see inside vLLM processes (checked on arrival)."),
    EnvVar("VERL_CPU_VLLM_PLUGIN_PIDS", "wire", None, "verl/cpu/vllm_plugin.py",
           "Where vLLM processes record that this distribution's vLLM plugin ran (tests)."),
    EnvVar("VERL_CPU_VLLM_PROBE_DIR", "wire", None, "verl/cpu/rollout/vllm_worker.py",
           "Where each vLLM worker writes what it saw (tests)."),
)

BY_NAME: dict[str, EnvVar] = {v.name: v for v in VARIABLES}


def parse_bool(name: str, text: str | bool) -> bool:
    """THE boolean parser: 1/true/yes/on and 0/false/no/off/'' (any case); anything else names ``name``.

    Also used for config values read as switches (a YAML bool passes through)."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise EnvValueError(f"{name}={text!r} is not a boolean: expected one of {', '.join(TRUE_WORDS)} or {', '.join(w for w in FALSE_WORDS if w)}")


def _spec(name: str) -> EnvVar:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a registered variable of verl-ascend (verl_ascend/envs.py)") from None


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The text set for ``name``, or its registered default (None when it has none)."""
    spec = _spec(name)
    environ = os.environ if environ is None else environ
    return environ.get(name, spec.default)


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A registered boolean variable; unset without a default means False."""
    spec = _spec(name)
    if spec.kind != "bool":
        raise TypeError(f"{name} is registered as {spec.kind}, not bool")
    text = raw(name, environ)
    return False if text is None else parse_bool(name, text)


def number(name: str, environ: Mapping[str, str] | None = None) -> int | float | None:
    """A registered int/float variable (None when unset without a default)."""
    spec = _spec(name)
    text = raw(name, environ)
    if text is None:
        return None
    cast = {"int": int, "float": float}[spec.kind]
    try:
        return cast(text)
    except ValueError:
        raise EnvValueError(f"{name}={text!r}: expected a{'n integer' if cast is int else ' number'}") from None


def main(argv: list[str] | None = None) -> int:
    """Print every variable: name, kind, the value in this shell (or the default), what it does."""
    del argv
    for spec in VARIABLES:
        value = os.environ.get(spec.name)
        shown = f"{value!r} (set)" if value is not None else f"{spec.default!r} (default)"
        print(f"{spec.name:34} {spec.kind:6} {shown:28} {spec.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
