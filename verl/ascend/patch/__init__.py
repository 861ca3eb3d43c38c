"""The Ascend backend's runtime patches (their code).

Each is a row of this backend's seam rows (:mod:`verl.ascend.seams`), installed by
``verl_ascend.seams.install("plugin")``; ``verl-ascend seams`` prints their status.
"""
