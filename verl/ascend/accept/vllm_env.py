"""Check 3: a real vLLM process reports the profile variables it received.

The environment is delivered as a verl job delivers it: the env profile is applied to a config
(``apply_to_config``: the train role into the job's Ray runtime env, ``VERL_ASCEND_ENV_PROFILE``),
and the rollout server's variables come from the Ascend platform's ``rollout_env_vars()``, which
upstream puts into the rollout server's runtime env. :mod:`verl.ascend.accept.vllm_probe` then
starts ``vllm.LLM`` with that environment; in each vLLM process the general plugin writes what it
received (``VERL_ASCEND_VLLM_ENV_REPORT``). Every variable of the profile's rollout role must
arrive with the value the profile emitted, in every process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from verl.ascend import emulator
from verl.ascend.accept.record import Check, stopped_by_ctrl_c
from verl.ascend.env.profile import RAY_ENV_KEY, apply_to_config
from verl.ascend.env.vllm_plugin import REPORT_DIR_ENV

# vLLM's CPU build sizes its KV cache from this (GiB); the tiny model needs next to nothing.
CPU_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}


def delivered_env(tp: int) -> tuple[dict[str, str], dict[str, str]]:
    """(what the profile emitted for a rollout process, the environment a rollout server gets)."""
    from verl.ascend.platform import AscendPlatform

    config = OmegaConf.create({"trainer": {"device": "npu"},
                               "actor_rollout_ref": {"rollout": {"name": "vllm", "tensor_model_parallel_size": tp}}})
    environ = {k: v for k, v in os.environ.items() if k != emulator.ENV_FLAG}  # vLLM runs as itself
    profile = apply_to_config(config, environ)
    job_env = {k: str(v) for k, v in OmegaConf.to_container(OmegaConf.select(config, RAY_ENV_KEY)).items()}
    return profile.effective("rollout"), {**job_env, **AscendPlatform().rollout_env_vars()}


def compare(expected: dict[str, str], reports: list[dict]) -> list[str]:
    """One line per variable that did not arrive, or arrived changed, in a vLLM process."""
    if not reports:
        return ["no vLLM process wrote an arrival report: the general plugin verl_ascend_env_check did not run"]
    problems = []
    for report in reports:
        received = report.get("received", {})
        for name, value in sorted(expected.items()):
            if name not in received or received[name] is None:
                problems.append(f"vLLM process {report['pid']}: {name} did not arrive (profile: {value})")
            elif received[name] != value:
                problems.append(f"vLLM process {report['pid']}: {name}={received[name]} arrived, the profile emitted {value}")
    return problems


def read_reports(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def run(model: Path, folder: Path, tp: int, emulated: bool, timeout_s: float) -> Check:
    check = Check("vllm_env", "a vLLM process reports the profile variables it received")
    reports_dir = folder / "vllm_env"
    reports_dir.mkdir(exist_ok=True)
    for stale in reports_dir.glob("*.json"):
        stale.unlink()
    expected, env = delivered_env(tp)
    child_env = {**CPU_DEFAULTS, **os.environ, **env, REPORT_DIR_ENV: str(reports_dir)}
    child_env.pop(emulator.ENV_FLAG, None)
    result = folder / "vllm_env.json"
    cmd = [sys.executable, "-m", "verl.ascend.accept.vllm_probe", str(model), "--result", str(result),
           "--dtype", "float32" if emulated else "bfloat16"]
    with open(folder / "vllm_env.log", "w") as log:
        proc = subprocess.run(cmd, env=child_env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    if stopped_by_ctrl_c(proc.returncode):
        raise KeyboardInterrupt  # the user's stop, not vLLM failing on this host
    reports = read_reports(reports_dir)
    check.value = {"expected": expected, "processes": [{"pid": r["pid"], "ppid": r["ppid"], "argv": r["argv"]}
                                                       for r in reports],
                   "variables_checked": len(expected) * len(reports), "log": str(folder / "vllm_env.log")}
    if proc.returncode != 0 or not result.is_file():
        check.fail(f"the vLLM process exited {proc.returncode} without generating; see {folder / 'vllm_env.log'}")
    else:
        check.value.update(json.loads(result.read_text()))
    for line in compare(expected, reports):
        check.fail(line)
    if emulated:
        check.device_only.append("vllm-ascend's processes (its platform, its lazy reads of VLLM_ASCEND_* variables)")
        check.stands_in.append("vLLM's CPU build: the same general plugin runs in each of its processes "
                               "(launcher, engine core, worker) and reports what arrived there")
    return check
