"""Rollout-profiling rules: a profiling run that records nothing costs a full job start for nothing.

Upstream 0.9.1's vLLM server (``workers/rollout/vllm_rollout/vllm_async_server.py``) traces the
engine only when the rollout profiler is enabled, its tool is ``torch`` or ``npu``, the tool
config is ``discrete`` and the step is listed in ``global_profiler.steps``; traces go under
``<save_path>/agent_loop_rollout_replica_<rank>``. Each missing piece is silent: no trace, no error.
Note that ``rollout.profiler.enable`` follows ``actor.profiler.enable`` unless set.
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.view import ROLLOUT, ConfigView

PROF = f"{ROLLOUT}.profiler"
ROLLOUT_TOOLS = ("npu", "torch")


def rollout_profiler_output(view: ConfigView) -> Iterator[Finding]:
    if not view.get_bool(f"{PROF}.enable"):
        return
    tool = view.get(f"{PROF}.tool")
    if not tool:
        yield _finding(
            ERROR,
            "rollout profiling is enabled but no tool is set (global_profiler.tool=null): nothing is recorded. "
            "Set global_profiler.tool=npu on Ascend (torch elsewhere).",
            (f"{PROF}.enable", "global_profiler.tool"),
        )
        return
    if tool not in ROLLOUT_TOOLS:
        yield _finding(
            ERROR,
            f"rollout profiling with tool {tool!r}: upstream's rollout server supports only {ROLLOUT_TOOLS} and drops "
            "the profiler with a log line. Set global_profiler.tool=npu.",
            (f"{PROF}.tool", "global_profiler.tool"),
        )
        return
    save_path = view.get(f"{PROF}.save_path")
    if save_path is None or not str(save_path).strip():
        yield _finding(
            ERROR,
            "rollout profiling is enabled with nowhere to write: save_path is empty. Set "
            "global_profiler.save_path to a directory on the node(s) you will read traces from.",
            (f"{PROF}.save_path", "global_profiler.save_path"),
        )
    steps = view.get("global_profiler.steps")
    if not steps and not view.get_bool("global_profiler.profile_continuous_steps"):
        yield _finding(
            ERROR,
            "rollout profiling is enabled but global_profiler.steps is empty: no step starts the profiler, so no "
            "trace is written. List the steps, e.g. global_profiler.steps=[2].",
            ("global_profiler.steps",),
        )
    discrete_key = f"{PROF}.tool_config.{tool}.discrete"
    if not view.get_bool(discrete_key):
        yield _finding(
            WARN,
            f"{discrete_key}=False: the vLLM engine is profiled only in discrete mode, so training roles are traced "
            f"but rollout is not (rollout.profiler.enable may be inherited from actor.profiler.enable). Set "
            f"{discrete_key}=True for rollout traces, or {PROF}.enable=False if you want training only.",
            (discrete_key, f"{PROF}.enable"),
        )


def _finding(severity: str, message: str, keys: tuple[str, ...]) -> Finding:
    return Finding("rollout_profiler_no_output", severity, message, keys)


RULES = (rollout_profiler_output,)
