"""Profiling for verl-ascend: the bottleneck report, offline NPU parsing, the regression gate.

* ``verl-ascend report DIR [DIR...]`` -- the article's table from what a profiled
  run leaves (traces, torch_npu text export, metrics log), as text, JSON and plots.
* ``verl-ascend parse-traces DIR`` -- parse raw torch_npu data whose online parse failed.
* ``verl-ascend gate METRICS --baseline FILE`` -- a run's metrics against a stored
  baseline over a step window; exit 2 (refused) on a regression.

The check that runs after each profiled step of a live run (is every asked-for trace on disk?) belongs
to the run machinery: ``verl_ascend/run/trace_check.py``.

Nothing here imports torch, torch_npu or upstream verl at import time: the report must run on any
machine, in a lean process. Living outside upstream's ``verl`` namespace, importing it never runs
upstream's ``verl/__init__`` (torch, Ray: about 9 s and 370 MB).
"""
