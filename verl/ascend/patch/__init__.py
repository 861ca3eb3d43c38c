"""The Ascend backend's runtime patches (their code); the index of them moved.

Every contact this distribution has with upstream code -- these patches included -- is a row
of :mod:`verl_ascend.seams.index` (``python -m verl_ascend.seams`` prints their status). The
names ``PATCHES``, ``PATCHES_BY_ID``, ``RuntimePatch`` and ``source_fingerprint`` are
re-exported here for one release.
"""

from __future__ import annotations

from verl_ascend.seams.index import SEAMS as PATCHES
from verl_ascend.seams.index import SEAMS_BY_ID as PATCHES_BY_ID
from verl_ascend.seams.index import RuntimePatch, source_fingerprint

__all__ = ["PATCHES", "PATCHES_BY_ID", "RuntimePatch", "install_lazy_patches", "source_fingerprint"]


def install_lazy_patches() -> None:
    """Arm the patches that wait for their target's import (the verl plugin now calls
    ``verl_ascend.seams.install("plugin", owner="verl.ascend")``, which does the same)."""
    from verl.ascend.patch import fsdp_engine

    fsdp_engine.install()
