"""``vllm.general_plugins`` entry point: report, in every vLLM process on NPU, what the env profile delivered.

vLLM loads general plugins at the start of every vLLM process (API server, engine core, each
worker it spawns; vLLM 0.23.0 ``vllm/plugins/__init__.py``), so :func:`register` runs in all of
them, including the ones verl's rollout servers spawn. On the NPU platform it:

1. **checks env arrival** (always): the rollout role of the env profile (``VERL_ASCEND_ENV_PROFILE``)
   against this process's environment, one log line per process: the profile variables present,
   and any missing or different (a missing ``VLLM_ASCEND_*`` variable, read lazily by vllm-ascend,
   is filled in from the profile); and warns when this host's CPU is not the kind the profile was
   resolved for (its rollout ``CPU_AFFINITY_CONF`` depends on whether vllm-ascend binds here);
2. **checks vllm-ascend's worker patches** are in place before the first vLLM model module loads
   in a worker process (an import observer that only looks; it imports nothing).

With ``VERL_ASCEND_VLLM_ENV_REPORT=DIR`` (set by the acceptance command, ``verl-ascend
accept``) it also writes, in every vLLM process on any platform, ``DIR/<pid>.json``:
the profile variables as this process received them and the arrival check's verdict, so the
value is read where vLLM consumes it, not where the profile set it.

There used to be an import-order hook here that imported the worker patches itself, for
vllm-ascend 0.10.0rc1-0.11.x (worker patches rebinding names at import). Every supported release
(0.23.0 and later, see ``verl/ascend/env/snapshots/``) chooses mc2 when the layer is built
(vllm-ascend PR #2167, v0.10.2rc1) and looks kernels up at call time (PR #4354, v0.12.0rc1), and
imports its worker patches in ``NPUWorker.__init__`` before the model loads, so the hook acted on
no supported version and was removed.

Seam ``vllm_env_check``: a check, not a fix (vLLM has no hook that reports a process's environment); it stays
while the env profile is delivered through the rollout servers' ``runtime_env``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import logging
import os
import platform
import sys

logger = logging.getLogger("verl.ascend.env.vllm_plugin")

WORKER_PATCH_MODULE = "vllm_ascend.patch.worker"
WORKER_MODULE = "vllm_ascend.worker.worker"  # NPUWorker: present in worker processes only
MODELS_PACKAGE = "vllm.model_executor.models"
# Helper modules of the models package (imported by its __init__): not model definitions.
MODELS_HELPERS = frozenset({"registry", "interfaces", "interfaces_base", "utils", "adapters", "module_mapping"})
LAZY_READ_PREFIX = "VLLM_ASCEND_"
REPORT_DIR_ENV = "VERL_ASCEND_VLLM_ENV_REPORT"


def _on_npu_platform() -> bool:
    if importlib.util.find_spec("vllm_ascend") is None:
        return False
    try:
        from vllm.platforms import current_platform
    except Exception as e:
        logger.debug("vllm.platforms unavailable: %s", e)
        return False
    return getattr(current_platform, "device_type", None) == "npu"


def check_env_arrival(environ=None) -> dict[str, list[str]]:
    """Log one line: the rollout profile's variables present here, and any missing or different.

    Missing ``VLLM_ASCEND_*`` variables (read lazily by vllm-ascend) are filled in. Returns
    ``{"present": [...], "missing": [...], "different": [...], "filled": [...]}``.
    """
    from verl.ascend.env.wire import PROFILE_ENV, rollout_env_from_environ

    env = os.environ if environ is None else environ
    if not env.get(PROFILE_ENV):
        logger.warning("verl.ascend env check (pid %s): no %s here; no env profile reached this process",
                       os.getpid(), PROFILE_ENV)
        return {"present": [], "missing": [], "different": [], "filled": []}
    profile = rollout_env_from_environ(env)
    present = [name for name, value in profile.items() if env.get(name) == value]
    missing = [name for name in profile if name not in env]
    different = [name for name, value in profile.items() if name in env and env[name] != value]
    filled = [name for name in missing if name.startswith(LAZY_READ_PREFIX)]
    for name in filled:
        env[name] = profile[name]
    level = logging.WARNING if missing or different else logging.INFO
    logger.log(
        level,
        "verl.ascend env check (pid %s): present %s; missing %s (filled in: %s); different %s",
        os.getpid(),
        ", ".join(present) or "none",
        ", ".join(missing) or "none",
        ", ".join(filled) or "none",
        ", ".join(different) or "none",
    )
    return {"present": present, "missing": missing, "different": different, "filled": filled}


def check_host_cpu(environ=None, machine: str | None = None) -> bool:
    """False (and a warning) when this host's CPU is ARM and the profile's is not, or the reverse.

    vllm-ascend binds its workers itself on ARM only, so the rollout ``CPU_AFFINITY_CONF`` the driver
    chose (``ascend.env.host_cpu``) is wrong here when the two differ.
    """
    from verl.ascend.env.wire import is_arm_cpu, profile_from_environ

    data = profile_from_environ(os.environ if environ is None else environ) or {}
    expected, here = data.get("host_cpu"), (machine or platform.machine()).lower()
    if not expected or is_arm_cpu(expected) == is_arm_cpu(here):
        return True
    logger.warning(
        "verl.ascend host check (pid %s): the env profile was resolved for host CPU %s but this vLLM process runs on "
        "%s, so its rollout CPU_AFFINITY_CONF=%s assumes the wrong binder (vllm-ascend binds its workers on ARM "
        "only); set ascend.env.host_cpu=%s",
        os.getpid(), expected, here, data.get("rollout", {}).get("CPU_AFFINITY_CONF", "unset"), here,
    )
    return False


def _is_model_module(fullname: str) -> bool:
    prefix = MODELS_PACKAGE + "."
    return fullname.startswith(prefix) and fullname[len(prefix) :].split(".")[0] not in MODELS_HELPERS


class _ModelImportObserver(importlib.abc.MetaPathFinder):
    """At the first model-module import in a worker process, checks the worker patches are loaded."""

    def find_spec(self, fullname, path=None, target=None):
        if not _is_model_module(fullname):
            return None
        remove_observer()
        check_worker_patches(fullname)
        return None  # observe only: the regular finders load the module


_observer = _ModelImportObserver()


def check_worker_patches(trigger: str) -> bool:
    """False (and a warning) when a worker process loads a model before vllm-ascend's worker patches."""
    if WORKER_MODULE not in sys.modules or WORKER_PATCH_MODULE in sys.modules:
        return True
    logger.warning(
        "verl.ascend (pid %s): %s is loading before %s: vllm-ascend's worker patches are not in place, the model "
        "may miss its Ascend replacements; check the vllm-ascend installation",
        os.getpid(),
        trigger,
        WORKER_PATCH_MODULE,
    )
    return False


def install_observer() -> None:
    if _observer not in sys.meta_path:
        sys.meta_path.insert(0, _observer)


def remove_observer() -> None:
    if _observer in sys.meta_path:
        sys.meta_path.remove(_observer)


def write_arrival_report(directory: str, environ=None) -> dict:
    """Run the arrival check here and write ``directory/<pid>.json``: what this process received."""
    from verl.ascend.env.wire import PROFILE_ENV, rollout_env_from_environ

    env = os.environ if environ is None else environ
    names = sorted(rollout_env_from_environ(env)) + [PROFILE_ENV]
    received = {name: env.get(name) for name in names}  # before the check fills anything in
    record = {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:2], "received": received,
              **check_env_arrival(env)}
    from verl_ascend.run.files import write_atomic

    os.makedirs(directory, exist_ok=True)
    write_atomic(os.path.join(directory, f"{os.getpid()}.json"), json.dumps(record, sort_keys=True).encode())
    return record


def register() -> None:
    """vLLM general-plugin entry point (idempotent); off the NPU platform it only writes the
    arrival report that ``VERL_ASCEND_VLLM_ENV_REPORT`` asks for."""
    from verl_ascend import envs

    report_dir = envs.raw(REPORT_DIR_ENV)
    if not _on_npu_platform():
        logger.debug("verl.ascend vLLM plugin inactive: not the NPU platform")
        if report_dir:
            write_arrival_report(report_dir)
        return
    if report_dir:
        write_arrival_report(report_dir)
    else:
        check_env_arrival()
    check_host_cpu()
    install_observer()
