"""The NPU emulator: run verl-ascend's NPU code paths on a CPU-only machine.

Opt-in and never a silent fallback: it activates in a process only when
``VERL_ASCEND_NPU_EMULATOR=1`` is set *and* no real ``torch_npu`` can be imported there. On an
Ascend machine the same tests therefore run against the real ``torch_npu`` unchanged, and on
a normal CPU run (variable unset) nothing here is touched and the CPU platform is picked.

What ``install()`` provides:
- ``sys.modules["torch_npu"]``: a stand-in module whose fused ops follow the documented
  numerics (:mod:`verl.ascend.emulator.fused_ops`), plus ``torch_npu.npu`` (device namespace)
  and ``torch_npu.npu.mstx`` (no-op markers). Each op call is a profiler range named
  ``TRACE_PREFIX + op`` (e.g. ``verl_ascend.emulator::npu_rms_norm``): a CPU trace has no device
  kernels, so these ranges are what stands in for RmsNorm/SwiGlu/RotaryMul in a CPU run's trace;
- ``torch.npu``: a CPU-backed device namespace (:mod:`verl.ascend.emulator.device`), so that
  upstream's ``PlatformNPU`` detection and device calls work; tensors stay on the CPU.

``verl.ascend.plugin.register()`` calls :func:`install` in every process where the variable
is set (the env profile forwards the variable to Ray workers). Tests call :func:`uninstall`
to leave the process as they found it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types

ENV_FLAG = "VERL_ASCEND_NPU_EMULATOR"
STANDIN_VERSION = "0.0.0+verl.ascend.emulator"
TRACE_PREFIX = "verl_ascend.emulator::"

_saved: dict[str, object] = {}


def requested(environ=None) -> bool:
    """Whether ``VERL_ASCEND_NPU_EMULATOR`` asks for the emulator (raises on a value it cannot read)."""
    from verl_ascend import envs

    return envs.flag(ENV_FLAG, environ)


def is_standin(module) -> bool:
    return bool(getattr(module, "__verl_ascend_emulator__", False))


def active() -> bool:
    """True when this process runs on the stand-in ``torch_npu``."""
    return is_standin(sys.modules.get("torch_npu"))


def real_torch_npu_importable() -> bool:
    """True when a real ``torch_npu`` imports in this process (it is imported, as on an NPU host)."""
    current = sys.modules.get("torch_npu")
    if current is not None:
        return not is_standin(current)
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # noqa: F401
    except Exception:  # a broken install counts as absent: the emulator may stand in
        return False
    return True


def _traced(name: str, fn):
    """``fn`` inside a profiler range named after the op (visible in torch.profiler traces)."""
    import functools

    import torch

    label = TRACE_PREFIX + name

    @functools.wraps(fn)
    def op(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)

    return op


def _build_torch_npu(npu_namespace: types.ModuleType) -> types.ModuleType:
    from verl.ascend.emulator import fused_ops

    mod = types.ModuleType("torch_npu", doc="verl-ascend's CPU stand-in for torch_npu (see verl.ascend.emulator).")
    mod.__spec__ = importlib.machinery.ModuleSpec("torch_npu", loader=None, is_package=True)
    mod.__path__ = []
    mod.__version__ = STANDIN_VERSION
    mod.__verl_ascend_emulator__ = True
    for name, fn in fused_ops.FUSED_OPS.items():
        setattr(mod, name, _traced(name, fn))
    mod.npu = npu_namespace
    return mod


def install() -> bool:
    """Install the stand-in ``torch_npu`` and ``torch.npu``; returns whether the emulator is active.

    Idempotent. Does nothing (returns False) when a real ``torch_npu`` imports.

    Seam ``emulator_torch_npu_modules``: upstream verl imports ``torch_npu`` and calls its members on the NPU
    platform, so the stand-ins let the Ascend backend's tests and the emulated-NPU e2e run go without Ascend
    hardware. Only with ``VERL_ASCEND_NPU_EMULATOR=1`` and no real torch_npu; never on real NPUs. A test
    double, not a fix (torch has no registry for device stand-ins): it stays while the NPU tests run without
    Ascend hardware.
    """
    if active():
        return True
    if real_torch_npu_importable():
        return False
    import torch

    from verl.ascend.emulator import device

    npu_ns = device.build_namespace()
    torch_npu = _build_torch_npu(npu_ns)
    _saved.clear()
    _saved["torch.npu"] = getattr(torch, "npu", None)
    for name in ("torch_npu", "torch_npu.npu", "torch_npu.npu.mstx", "torch.npu"):
        _saved[f"sys.modules:{name}"] = sys.modules.get(name)
    sys.modules["torch_npu"] = torch_npu
    sys.modules["torch_npu.npu"] = npu_ns
    sys.modules["torch_npu.npu.mstx"] = npu_ns.mstx
    sys.modules["torch.npu"] = npu_ns
    torch.npu = npu_ns

    from verl.ascend.patch import emulator_flags

    emulator_flags.install()
    return True


def install_if_requested() -> bool:
    """The ``plugin`` stage's installer (seam ``emulator_torch_npu_modules``): :func:`install` when
    :func:`requested`; returns whether the emulator is active."""
    return install() if requested() else False


def uninstall() -> None:
    """Undo :func:`install` (for tests): remove the stand-ins and restore upstream's NPU flags."""
    if not active():
        return
    import torch

    from verl.ascend.patch import emulator_flags

    emulator_flags.uninstall()
    for key, value in _saved.items():
        if key == "torch.npu":
            if value is None:
                if hasattr(torch, "npu"):
                    delattr(torch, "npu")
            else:
                torch.npu = value
            continue
        name = key.split(":", 1)[1]
        if value is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = value
    _saved.clear()
