"""How often each patched forward ran its fused kernel, per process (the acceptance command reads it).

A patch that is installed but never reached (a model class that upstream swapped, a fallback taken
on every call) looks the same in the fused-op report as one that runs; counting the calls that went
to the kernel tells them apart. With ``VERL_ASCEND_FUSED_OP_COUNTS=DIR`` in a process's
environment (the acceptance command puts it into the job's Ray runtime env), the counts are written
to ``DIR/<pid>.json`` after every call: Ray ends its workers without running ``atexit``, and the
acceptance run's tiny model makes a few hundred calls. Without it nothing is counted and the
forward pays one dictionary lookup. With it, a ``torch.compile``d forward breaks its graph at the
count (file I/O): counting is for the eager acceptance run, not for timed runs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from verl_ascend import envs

ENV = "VERL_ASCEND_FUSED_OP_COUNTS"

_counts: Counter = Counter()
_state = {"dir": envs.raw(ENV) or None}


def record(op: str) -> None:
    """Count one call of ``op``'s kernel (a no-op unless ``VERL_ASCEND_FUSED_OP_COUNTS`` is set)."""
    if _state["dir"] is None:
        return
    _counts[op] += 1
    flush()


def flush() -> None:
    directory = _state["dir"]
    if directory is None:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "counts": dict(_counts)}, f, sort_keys=True)
    os.replace(path + ".tmp", path)


def read(directory: str | Path) -> dict[str, dict[str, int]]:
    """pid -> {op: calls}, from every process that wrote into ``directory``."""
    out = {}
    for path in sorted(Path(directory).glob("*.json")):
        data = json.loads(path.read_text())
        out[str(data["pid"])] = {str(k): int(v) for k, v in data["counts"].items()}
    return out
