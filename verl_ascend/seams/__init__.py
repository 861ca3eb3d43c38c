"""Every contact this distribution has with upstream code, in one index, with one installer per process stage.

:mod:`verl_ascend.seams.index` lists each contact (runtime patch, private override, private
registry, instance rebind, module substitution) with its fingerprints and an executable
removal condition; :func:`install` installs the rows of one process stage; ``python -m
verl_ascend.seams`` prints every row's status. This package never imports ``verl.ascend``,
``verl.cpu`` or ``recipe``; backends are reached only through the ``install`` dotted paths of
the index rows. :mod:`verl_ascend.seams.post_import` is the generic post-import hook the
installers use.
"""

from verl_ascend.seams.index import SEAMS, SEAMS_BY_ID, STAGES, Seam, install, installed, source_fingerprint

__all__ = ["SEAMS", "SEAMS_BY_ID", "STAGES", "Seam", "install", "installed", "source_fingerprint"]
