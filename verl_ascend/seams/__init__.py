"""Every contact this distribution has with upstream code, in one index, with one installer per process stage.

The mechanism only: :mod:`verl_ascend.seams.index` holds the row type (:class:`Seam`), the removal
conditions, the stages and :func:`install`, and assembles the one index from the rows each home
declares next to its code (entry-point group ``verl_ascend.seams``); ``verl-ascend
seams`` prints every row's status; :mod:`verl_ascend.seams.scan` re-derives the
contacts from the source; :mod:`verl_ascend.seams.post_import` is the post-import hook the
installers use. This package never imports ``verl.ascend``, ``verl.cpu`` or ``recipe``.
``SEAMS`` and ``SEAMS_BY_ID`` are assembled on first use.
"""

from verl_ascend.seams import index
from verl_ascend.seams.index import STAGES, Seam, install, installed, source_fingerprint

__all__ = ["SEAMS", "SEAMS_BY_ID", "STAGES", "Seam", "install", "installed", "source_fingerprint"]


def __getattr__(name: str):
    if name in ("SEAMS", "SEAMS_BY_ID"):
        return getattr(index, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
