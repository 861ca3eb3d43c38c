"""A ``torch.<device>``-style namespace for the CPU.

Upstream verl calls the device module returned by ``get_torch_device()`` as if it were
``torch.cuda`` (memory statistics, streams, RNG state, ``get_device_name``...). ``torch.cpu``
covers only part of that surface, so this module completes it with the answers that are
true on a CPU: memory figures come from the process (RSS) and the host, there is one
device, and streams/events are ``torch.cpu``'s no-op ones.
"""

from __future__ import annotations

import os
import platform as _py_platform

import torch

# Re-exported from torch.cpu: same semantics.
Stream = torch.cpu.Stream
Event = torch.cpu.Event
stream = torch.cpu.stream
current_stream = torch.cpu.current_stream
synchronize = torch.cpu.synchronize
is_available = torch.cpu.is_available


def device_count() -> int:
    return 1


def current_device() -> str:
    # A string, not an int: upstream passes it to ``.to(device=...)``, where ``0`` would mean cuda:0.
    return "cpu"


def set_device(device) -> None:  # noqa: ARG001 - one device, nothing to select
    return None


def get_device_name(device=None) -> str:  # noqa: ARG001
    return f"CPU ({_py_platform.processor() or _py_platform.machine()})"


def get_device_capability(device=None):  # noqa: ARG001
    return (None, None)


def empty_cache() -> None:
    return None


def ipc_collect() -> None:
    return None


def set_per_process_memory_fraction(fraction, device=None) -> None:  # noqa: ARG001
    return None


def _rss_bytes() -> int:
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def memory_allocated(device=None) -> int:  # noqa: ARG001
    return _rss_bytes()


memory_reserved = memory_allocated


def max_memory_allocated(device=None) -> int:  # noqa: ARG001
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device=None) -> None:  # noqa: ARG001
    return None


def mem_get_info(device=None) -> tuple[int, int]:  # noqa: ARG001
    """(free, total) host memory in bytes, as ``torch.cuda.mem_get_info`` reports device memory."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = os.sysconf("SC_PHYS_PAGES") * page
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError):
        free = total
    return free, total


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


manual_seed_all = manual_seed


def get_rng_state(device=None):  # noqa: ARG001
    return torch.get_rng_state()


def set_rng_state(state, device=None) -> None:  # noqa: ARG001
    torch.set_rng_state(state)
