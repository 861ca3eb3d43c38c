"""``vllm.general_plugins`` entry point: vllm-ascend's worker patches before any vLLM model module.

vLLM loads general plugins at the start of every vLLM process (API server, engine core, each
worker it spawns), before any model is loaded, so this runs in all of them, including the
ones verl's rollout servers spawn.

The problem: vllm-ascend's worker patches rebind module-level names at *import* time; a
model module imported earlier keeps the names it bound with ``from ... import ...``:
- 0.10.0rc1 and 0.10.1rc1: ``vllm_ascend.patch.worker`` rebinds
  ``vllm.model_executor.layers.linear.RowParallelLinear`` to the mc2 class if
  ``VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE`` is set *then*: mc2 is silently lost;
- 0.11.x: the worker patches rebind Qwen3-Next's fla kernels (``chunk_gated_delta_rule``, ...)
  that the model module imported by name; vllm-ascend PR #4354 (in 0.12.0rc1) says it
  outright: "in frameworks like verl, the model file is often imported before vllm-ascend
  initializes and applies its patches".

What :func:`register` does, on the NPU platform with such a version:
1. makes sure the rollout role of the env profile (``VERL_ASCEND_ENV_PROFILE``) is in this
   process's environment for the variables vllm-ascend reads lazily (``VLLM_ASCEND_*``), and
   warns about any profile variable that did not arrive;
2. installs an import guard that imports ``vllm_ascend.patch.worker`` right before the first
   ``vllm.model_executor.models.<model>`` module is imported (or now, if one already is -- with
   a warning naming it, since its bindings can no longer be fixed).

It does nothing on non-NPU platforms, and nothing on vllm-ascend >= 0.12.0rc1: mc2 is chosen
when ``AscendRowParallelLinear`` is *constructed* since 0.10.2rc1 (PR #2167, commit 5a71815,
``vllm_ascend/ops/linear.py``), and the Qwen3-Next kernels are looked up at call time since
0.12.0rc1 (PR #4354, commit 463910e). Releases before 0.10.0rc1 have no mc2 switch and no
known case. ``VERL_ASCEND_VLLM_IMPORT_ORDER=0`` turns the hook off, ``=1`` forces it
regardless of version (still NPU only).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass

logger = logging.getLogger("verl.ascend.vllm_plugin")

SWITCH_ENV = "VERL_ASCEND_VLLM_IMPORT_ORDER"
WORKER_PATCH_MODULE = "vllm_ascend.patch.worker"
MODELS_PACKAGE = "vllm.model_executor.models"
# Helper modules of the models package (imported by its __init__): not model definitions.
MODELS_HELPERS = frozenset({"registry", "interfaces", "interfaces_base", "utils", "adapters", "module_mapping"})
FIRST_AFFECTED_VERSION = "0.10.0rc1"  # VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE introduced (PR #1926)
ORDER_FIXED_VERSION = "0.12.0rc1"  # last known import-order dependency removed (PR #4354)
LAZY_READ_PREFIX = "VLLM_ASCEND_"


@dataclass(frozen=True)
class Decision:
    needed: bool
    reason: str


def _vllm_ascend_version() -> str | None:
    for dist in ("vllm_ascend", "vllm-ascend"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def version_needs_hook(version: str | None) -> bool:
    """True for vllm-ascend releases whose worker patches must precede model imports."""
    from packaging.version import InvalidVersion, Version

    if version is None:
        return True  # unknown build: ordering the import is harmless, skipping it may lose mc2
    try:
        parsed = Version(version)
    except InvalidVersion:
        return True
    return Version(FIRST_AFFECTED_VERSION) <= parsed < Version(ORDER_FIXED_VERSION)


def _on_npu_platform() -> bool:
    try:
        from vllm.platforms import current_platform
    except Exception as e:
        logger.debug("vllm.platforms unavailable: %s", e)
        return False
    return getattr(current_platform, "device_type", None) == "npu"


def decide(environ=None) -> Decision:
    env = os.environ if environ is None else environ
    switch = env.get(SWITCH_ENV, "").strip().lower()
    if switch in ("0", "false", "off", "no"):
        return Decision(False, f"{SWITCH_ENV}={switch}")
    if importlib.util.find_spec("vllm_ascend") is None:
        return Decision(False, "vllm_ascend is not installed (not an Ascend host)")
    if not _on_npu_platform():
        return Decision(False, "vLLM's current platform is not NPU")
    if switch in ("1", "true", "on", "yes"):
        return Decision(True, f"{SWITCH_ENV}={switch} (forced)")
    version = _vllm_ascend_version()
    if version_needs_hook(version):
        return Decision(True, f"vllm-ascend {version} rebinds names at import of {WORKER_PATCH_MODULE}")
    return Decision(False, f"vllm-ascend {version} does not depend on the import order of its worker patches")


def imported_model_modules() -> list[str]:
    prefix = MODELS_PACKAGE + "."
    return sorted(
        name
        for name in list(sys.modules)
        if name.startswith(prefix) and name[len(prefix) :].split(".")[0] not in MODELS_HELPERS
    )


def apply_profile_environment(environ=None) -> dict[str, list[str]]:
    """Check this process's environment against the rollout profile it should have received.

    Missing ``VLLM_ASCEND_*`` variables (read lazily by vllm-ascend) are filled in; anything
    missing or different is reported in one warning. Returns ``{"missing": [...], "different": [...]}``.
    """
    from verl.ascend.env_profile import rollout_env_from_environ

    env = os.environ if environ is None else environ
    profile = rollout_env_from_environ(env)
    missing = [name for name in profile if name not in env]
    different = [name for name, value in profile.items() if name in env and env[name] != value]
    filled = [name for name in missing if name.startswith(LAZY_READ_PREFIX)]
    for name in filled:
        env[name] = profile[name]
    if missing or different:
        logger.warning(
            "verl.ascend: this vLLM process's environment differs from the env profile: missing %s (filled in: %s), "
            "different %s. Check that the rollout server got the platform's rollout_env_vars().",
            ", ".join(missing) or "none",
            ", ".join(filled) or "none",
            ", ".join(different) or "none",
        )
    return {"missing": missing, "different": different}


def _import_worker_patches(trigger: str) -> None:
    importlib.import_module(WORKER_PATCH_MODULE)
    logger.info("verl.ascend: imported %s before %s (pid %s)", WORKER_PATCH_MODULE, trigger, os.getpid())


class _ModelImportGuard(importlib.abc.MetaPathFinder):
    """Imports the worker patches right before the first model module; then removes itself."""

    def find_spec(self, fullname, path=None, target=None):
        prefix = MODELS_PACKAGE + "."
        if not fullname.startswith(prefix) or fullname[len(prefix) :].split(".")[0] in MODELS_HELPERS:
            return None
        uninstall_guard()
        _import_worker_patches(fullname)
        return None  # let the regular finders load the model module, now after the patches


_guard = _ModelImportGuard()


def uninstall_guard() -> None:
    if _guard in sys.meta_path:
        sys.meta_path.remove(_guard)


def install_guard() -> None:
    already = imported_model_modules()
    if already:
        logger.warning(
            "verl.ascend: vLLM model module(s) %s were imported before vllm-ascend's worker patches; "
            "names they bound (e.g. RowParallelLinear, hence mc2) keep the unpatched classes",
            ", ".join(already),
        )
        _import_worker_patches("(late) " + already[0])
        return
    if WORKER_PATCH_MODULE in sys.modules:
        return
    if _guard not in sys.meta_path:
        sys.meta_path.insert(0, _guard)


def register() -> None:
    """vLLM general-plugin entry point (idempotent)."""
    decision = decide()
    if not decision.needed:
        logger.debug("verl.ascend import-order hook inactive: %s", decision.reason)
        return
    apply_profile_environment()
    install_guard()
    logger.info("verl.ascend import-order hook active: %s", decision.reason)
