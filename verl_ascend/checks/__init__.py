"""Config checks (the "doctor"): refuse a run whose settings would silently do nothing or conflict.

Why: a DAPO job on 128 Ascend cards runs for days, and several settings that look right do
nothing in upstream verl 0.9.1 (overlong shaping under legacy keys, knobs the V1 trainer ignores,
prefetch where the engine does not read it) or conflict at run time (task queue 2 with graph mode,
AIV with mc2). The doctor reads the composed config and the environment before Ray starts and
says, for each problem, what would happen and what to change.

Use::

    from verl.ascend import doctor
    findings = doctor.check(config, strict=False)   # raises doctor.DoctorError on errors

or ``python -m recipe.dapo_ascend.doctor [--config-name NAME] [--strict] [overrides...]``.

Severity: ``error`` blocks the run; ``warn`` blocks only under strict (``strict=True``,
``--strict`` or ``VERL_ASCEND_DOCTOR_STRICT=1``); ``info`` never blocks. A rule the user knows
to be wrong for their case can be listed in ``VERL_ASCEND_DOCTOR_IGNORE=rule_a,rule_b``: its
findings are kept, downgraded to info, so the decision stays visible in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from verl_ascend.checks import (
    rules_context,
    rules_effective,
    rules_fsdp,
    rules_layout,
    rules_profiling,
    rules_reward,
    rules_sampling,
    rules_schema,
)
from verl_ascend.checks.findings import ERROR, INFO, WARN, DoctorError, Finding
from verl_ascend.checks.view import ConfigView

STRICT_ENV = "VERL_ASCEND_DOCTOR_STRICT"
IGNORE_ENV = "VERL_ASCEND_DOCTOR_IGNORE"

ENTRY_POINT_GROUP = "verl_ascend.checks"

Rule = Callable[[ConfigView], Iterable[Finding]]
BUILTIN_RULES: tuple[Rule, ...] = (
    *rules_effective.RULES,
    *rules_reward.RULES,
    *rules_sampling.RULES,
    *rules_fsdp.RULES,
    *rules_layout.RULES,
    *rules_profiling.RULES,
    *rules_context.RULES,
    *rules_schema.RULES,
)

_registered: list[Rule] = []
_entry_points_loaded = False

__all__ = [
    "DoctorError", "Finding", "ERROR", "WARN", "INFO", "BUILTIN_RULES", "rules", "register",
    "register_sync_trainer_mode", "check", "diagnose", "blocking", "format_report",
]


def register(*new_rules: Rule) -> None:
    """Add rules of a backend or a recipe (idempotent: a rule registered twice runs once)."""
    for rule in new_rules:
        if rule not in _registered:
            _registered.append(rule)


def register_sync_trainer_mode(mode: str) -> None:
    """A registered trainer (``trainer.v1.trainer_mode``) that runs as upstream's synchronous trainer."""
    rules_sampling.SYNC_TRAINER_MODES.add(mode)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()()  # a provider that cannot load fails loudly: its rules would silently not run
    _entry_points_loaded = True


def rules() -> tuple[Rule, ...]:
    """Every rule that runs: the built-in ones, then those registered by backends and recipes."""
    _load_entry_points()
    return (*BUILTIN_RULES, *_registered)


def diagnose(config: Any, environ: Mapping[str, str] | None = None) -> list[Finding]:
    """Every finding of every rule, errors first; never raises for a problem in the config."""
    view = ConfigView(config, environ)
    ignored = {r.strip() for r in view.environ.get(IGNORE_ENV, "").split(",") if r.strip()}
    findings: list[Finding] = []
    for rule in rules():
        for finding in rule(view):
            if finding.rule in ignored and finding.severity != INFO:
                finding = Finding(finding.rule, INFO, f"(ignored via {IGNORE_ENV}) {finding.message}", finding.keys)
            findings.append(finding)
    order = {ERROR: 0, WARN: 1, INFO: 2}
    return sorted(findings, key=lambda f: order[f.severity])


def strict_from_env(environ: Mapping[str, str] | None = None) -> bool:
    from verl_ascend import envs

    return envs.flag(STRICT_ENV, environ)


def blocking(findings: Iterable[Finding], strict: bool) -> list[Finding]:
    """The findings that stop a run: errors, and warnings when strict."""
    stops = {ERROR, WARN} if strict else {ERROR}
    return [f for f in findings if f.severity in stops]


def check(config: Any, strict: bool = False, environ: Mapping[str, str] | None = None) -> list[Finding]:
    """Run every rule; raise DoctorError listing the blocking findings, else return all findings.

    ``strict`` is also switched on by ``VERL_ASCEND_DOCTOR_STRICT=1`` in ``environ``.
    """
    strict = bool(strict) or strict_from_env(environ)
    findings = diagnose(config, environ)
    stops = blocking(findings, strict)
    if stops:
        raise DoctorError(stops, strict=strict)
    return findings


def format_report(findings: list[Finding], strict: bool) -> str:
    """Human-readable findings plus a one-line verdict (used by the CLI and the dry run)."""
    lines = [str(f) for f in findings] or ["no findings"]
    stops = blocking(findings, strict)
    counts = {s: sum(f.severity == s for f in findings) for s in (ERROR, WARN, INFO)}
    summary = f"{counts[ERROR]} error(s), {counts[WARN]} warning(s), {counts[INFO]} note(s)"
    mode = "strict" if strict else "default"
    verdict = f"REFUSED ({summary}; {mode} mode)" if stops else f"OK ({summary}; {mode} mode)"
    lines.append(f"doctor verdict: {verdict}")
    return "\n".join(lines)
