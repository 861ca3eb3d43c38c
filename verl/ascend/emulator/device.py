"""A CPU-backed stand-in for the ``torch.npu`` device namespace.

Upstream's ``PlatformNPU`` and verl's device helpers call ``torch.npu.<fn>`` (device count,
set_device, synchronize, seeding, memory statistics). Under the emulator those calls must
succeed and give sensible answers while every tensor stays on the CPU:

- ``device_count()`` is the number of ids in ``ASCEND_RT_VISIBLE_DEVICES`` (Ray sets it for
  actors that hold ``NPU`` resources), else ``VERL_ASCEND_EMULATOR_DEVICES`` (default 8).
- seeding goes to the CPU generator, so seeded runs stay reproducible;
- memory statistics are zero and ``mem_get_info`` reports an idle 64 GiB card, so memory
  logging code runs without dividing by zero.

Why not a real ``npu`` device type (PrivateUse1 renamed to ``npu`` with a CPU-forwarding
tensor subclass)? It runs ``.to("npu")`` and simple ops, but the trainer also needs FSDP2,
DTensor, fused optimizers and a ``hccl`` process-group backend for that device; each needs
its own forwarding layer, far beyond what a test emulator should carry. So tensors stay on
``cpu`` and the Ascend platform reports ``device_name == "cpu"`` under the emulator.
"""

from __future__ import annotations

import os
import time
import types
from contextlib import contextmanager

import torch

EMULATED_DEVICE_NAME = "Ascend910B2 (verl-ascend CPU emulator)"
EMULATED_TOTAL_MEMORY = 64 * 1024**3
DEFAULT_DEVICE_COUNT = 8

_state = {"device": 0, "initialized": True}


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _state["initialized"]


def init() -> None:
    _state["initialized"] = True


def device_count() -> int:
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    raw = os.environ.get("VERL_ASCEND_EMULATOR_DEVICES", str(DEFAULT_DEVICE_COUNT))  # declared: verl/ascend/envs.py
    try:
        count = int(raw)
    except ValueError as e:
        raise ValueError(f"VERL_ASCEND_EMULATOR_DEVICES must be a positive integer, got {raw!r}") from e
    if count < 1:
        raise ValueError(f"VERL_ASCEND_EMULATOR_DEVICES must be a positive integer, got {raw!r}")
    return count


def _index(device) -> int:
    if device is None:
        return _state["device"]
    if isinstance(device, torch.device):
        return device.index or 0
    if isinstance(device, str):
        return int(device.split(":", 1)[1]) if ":" in device else 0
    return int(device)


def current_device() -> int:
    return _state["device"]


def set_device(device) -> None:
    index = _index(device)
    if not 0 <= index < device_count():
        raise RuntimeError(f"emulated NPU: invalid device index {index}; {device_count()} device(s) visible")
    _state["device"] = index


def synchronize(device=None) -> None:
    return None


def get_device_name(device=None) -> str:
    return EMULATED_DEVICE_NAME


def get_device_properties(device=None):
    return types.SimpleNamespace(name=EMULATED_DEVICE_NAME, total_memory=EMULATED_TOTAL_MEMORY, multi_processor_count=1)


def mem_get_info(device=None) -> tuple[int, int]:
    return EMULATED_TOTAL_MEMORY, EMULATED_TOTAL_MEMORY


def _zero(device=None) -> int:
    return 0


def memory_stats(device=None) -> dict:
    return {}


def reset_peak_memory_stats(device=None) -> None:
    return None


def empty_cache() -> None:
    return None


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    torch.manual_seed(seed)


def seed() -> None:
    torch.seed()


def initial_seed() -> int:
    return torch.initial_seed()


def get_rng_state(device=None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(state: torch.Tensor, device=None) -> None:
    torch.set_rng_state(state)


class Event:
    """Timing event; ``elapsed_time`` is wall-clock milliseconds (all work is synchronous)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self._t: float | None = None

    def record(self, stream=None) -> None:
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def wait(self, stream=None) -> None:
        return None

    def elapsed_time(self, end: Event) -> float:
        if self._t is None or end._t is None:
            raise RuntimeError("emulated NPU Event: record() both events before elapsed_time()")
        return (end._t - self._t) * 1000.0


class Stream:
    """A stream that runs everything in order on the CPU."""

    def __init__(self, device=None, priority: int = 0):
        self.device = device

    def synchronize(self) -> None:
        return None

    def wait_stream(self, other) -> None:
        return None

    def wait_event(self, event) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record()
        return event

    def query(self) -> bool:
        return True


_default_stream = Stream()


def current_stream(device=None) -> Stream:
    return _default_stream


def default_stream(device=None) -> Stream:
    return _default_stream


@contextmanager
def stream(s=None):
    yield s


@contextmanager
def device(index):
    previous = _state["device"]
    set_device(index)
    try:
        yield
    finally:
        _state["device"] = previous


def get_device_capability(device=None):
    return None


def _memory_namespace() -> types.ModuleType:
    mem = types.ModuleType("torch.npu.memory")
    mem._set_allocator_settings = lambda settings: None
    mem._snapshot = lambda device=None: {"segments": [], "device_traces": []}
    mem._record_memory_history = lambda *args, **kwargs: None
    mem._dump_snapshot = lambda path="dump_snapshot.pickle": None
    mem.memory_allocated = _zero
    mem.memory_reserved = _zero
    mem.mem_get_info = mem_get_info
    return mem


def _mstx_namespace() -> types.ModuleType:
    """No-op markers with the call shapes verl's ``mstx_profile`` uses."""
    mstx = types.ModuleType("torch_npu.npu.mstx")
    mstx.mark = lambda message="", stream=None, domain=None: None
    mstx.range_start = lambda message="", stream=None, domain=None: 0
    mstx.range_end = lambda range_id=0, domain=None: None

    @contextmanager
    def mstx_range(message="", stream=None, domain=None):
        yield

    mstx.mstx_range = mstx_range
    return mstx


def build_namespace() -> types.ModuleType:
    """A fresh ``torch.npu`` module object backed by the functions above."""
    ns = types.ModuleType("torch.npu", doc=__doc__)
    for name in (
        "is_available",
        "is_initialized",
        "init",
        "device_count",
        "current_device",
        "set_device",
        "synchronize",
        "get_device_name",
        "get_device_properties",
        "get_device_capability",
        "mem_get_info",
        "memory_stats",
        "reset_peak_memory_stats",
        "empty_cache",
        "manual_seed",
        "manual_seed_all",
        "seed",
        "initial_seed",
        "get_rng_state",
        "set_rng_state",
        "current_stream",
        "default_stream",
        "stream",
        "device",
        "Event",
        "Stream",
    ):
        setattr(ns, name, globals()[name])
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(ns, name, _zero)
    ns.memory = _memory_namespace()
    ns.mstx = _mstx_namespace()
    ns.__verl_ascend_emulator__ = True
    return ns
