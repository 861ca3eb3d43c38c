"""Deprecated alias (kept for one release): the report moved to the neutral package ``verl_ascend.report``.

``python -m verl.ascend.profiler``, ``python -m verl.ascend.profiler.report`` and
``python -m verl.ascend.profiler.offline`` hand over to ``verl_ascend.report`` (same arguments). Use
``python -m verl_ascend.report``: it does not pay upstream's ``verl/__init__`` (torch, Ray) first.
"""
