"""Runtime-switch rules (task queue, HCCL expansion mode, mc2, graph mode): delegated, not copied.

The per-role environment profile (``verl.ascend.env.profile``) owns these rules because it is the
code that turns config and environment into the variables each process gets; a second copy here
would drift from what actually runs. Each ``EnvConflictError`` from its ``find_conflicts`` becomes
an error finding with the same rule id and keys; the profile's own warnings (e.g. AIV below TP 8)
become warnings.

Registered with the neutral ``verl_ascend.checks`` by this backend (entry point ``verl_ascend.checks:
ascend = verl.ascend.env.rules:register_checks`` in setup.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from verl_ascend.checks.findings import ERROR, INFO, WARN, Finding
from verl_ascend.checks.view import ConfigView

_WARNING_ID = re.compile(r"^\[(?P<rule>[A-Za-z0-9_]+)\]\s*(?P<message>.*)$", re.S)


def env_conflicts(view: ConfigView) -> Iterator[Finding]:
    """The NPU runtime-environment profile's conflicts, warnings and notes: an NPU job's only (a CPU job
    receives none of its variables, so its table is not even loaded there)."""
    if view.get("trainer.device") != "npu":
        return
    try:
        from verl.ascend.env import profile as env_profile
    except ImportError as exc:
        yield Finding(
            "env_rules_unavailable",
            INFO,
            f"skipped: verl.ascend.env.profile cannot be imported ({exc}); task-queue/AIV/mc2/graph-mode "
            "conflicts were not checked.",
        )
        return
    try:
        profile, conflicts = env_profile.evaluate_env_profile(view.config, view.environ)
    except Exception as exc:  # a broken profile table must stop the run, as a finding, not a traceback
        yield Finding(
            "env_profile_failed",
            ERROR,
            f"the env profile could not be evaluated ({type(exc).__name__}: {exc}); the per-role environment "
            "of this run is unknown. Fix verl/ascend/env/profile.yaml or the ascend.env section.",
            ("ascend.env",),
        )
        return
    for conflict in conflicts:
        yield Finding(conflict.rule, ERROR, str(conflict), tuple(conflict.keys))
    if conflicts:
        return
    for warning in profile.warnings:
        match = _WARNING_ID.match(warning)
        rule, message = (match["rule"], match["message"]) if match else ("env_profile_warning", warning)
        yield Finding(rule, WARN, message)
    for note in profile.notes:
        yield Finding("stack_route", INFO, note)


RULES = (env_conflicts,)


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``): the Ascend env-profile rules and the HCCL weight-sync
    engine's needs on the target vllm-ascend (``verl/ascend/weight_sync.py``)."""
    from verl.ascend import weight_sync
    from verl_ascend import checks

    checks.register(*RULES, *weight_sync.RULES)
