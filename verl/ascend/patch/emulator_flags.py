"""Emulator only: make upstream's import-time NPU flag agree with the emulated NPU.

``verl/__init__.py`` imports ``verl.utils.device`` (which computes ``is_npu_available`` once,
from ``hasattr(torch, "npu")``) *before* it loads the ``verl.plugins`` entry points. On an
Ascend host torch_npu is autoloaded by ``import torch``, so the flag is already True; under
the emulator ``torch.npu`` only appears when our plugin runs, one step too late. Modules
that read the flag later (``from verl.utils.device import is_npu_available``) would then take
the GPU/CPU branches while the platform says "huawei". This sets the flag (in
``verl.utils.device`` and in ``verl``'s own namespace, read at the end of its ``__init__``)
to True while the emulator is installed, and restores it on uninstall.

Registered in :mod:`verl.ascend.seams` as ``emulator_npu_flag``.

Upstream fix (none filed yet): evaluate ``is_npu_available`` lazily, after ``verl.plugins`` load (or through
the platform); the row goes then.
"""

from __future__ import annotations

import sys

_TARGETS = (("verl.utils.device", "is_npu_available"), ("verl", "is_npu_available"))
_saved: dict[tuple[str, str], object] = {}


def install() -> None:
    for module_name, attr in _TARGETS:
        module = sys.modules.get(module_name)
        if module is None or not hasattr(module, attr):
            continue
        _saved.setdefault((module_name, attr), getattr(module, attr))
        setattr(module, attr, True)


def uninstall() -> None:
    for (module_name, attr), value in _saved.items():
        module = sys.modules.get(module_name)
        if module is not None:
            setattr(module, attr, value)
    _saved.clear()
