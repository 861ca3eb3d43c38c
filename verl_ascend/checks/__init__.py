"""The one validation pipeline: every check of a run's config and inputs, as rules yielding findings.

``validate(config, environ, inputs=...)`` runs, in one pass, every rule: the built-in ones (this
package's ``rules_*.py``: launch checks and, with ``inputs=True``, the run's files (``preflight``),
what upstream's config objects hold (``rules_effective``), rollout engine, reward path, dynamic
sampling, FSDP switches, batch and card arithmetic (``rules_layout``), what upstream's asynchronous
trainer modes assert inside Ray (``rules_async``), what upstream's replay buffer asserts and what its
group-relative estimators do with one response per prompt (``rules_sampler``), rollout profiling, context
length, keys upstream does not define (``rules_schema``), and whether each phase's memory fits the card
(``rules_memory``)) and those registered by backends and
recipes through the entry-point group ``verl_ascend.checks`` (setup.py: the Ascend env-profile
conflicts, ``verl/ascend/env/rules.py``; the recipe's typed keys and rollout-tail policy,
``recipe/dapo_ascend/checks.py``; the run folders' destination, ``verl_ascend/run/run_guard.py``). It returns every ``Finding`` (errors first) and never
raises for a problem in the config, so a refusal names every culprit at once. The recipe's entry
point (``verl_ascend/launch``: ``prepare``, before Ray, with ``inputs=True``), ``DRY_RUN=1``
and ``verl-ascend doctor`` all call it, so they reach the same verdict on the same
config. Stages and tags: ``pipeline.py``.

Why: a DAPO job on 128 Ascend cards runs for days, and several settings that look right do
nothing in upstream verl 0.9.1 (overlong shaping under legacy keys, knobs the V1 trainer ignores,
prefetch where the engine does not read it) or conflict at run time (task queue 2 with graph mode,
AIV with mc2). The doctor reads the composed config and the environment before Ray starts and
says, for each problem, what would happen and what to change.

Use::

    from verl_ascend import checks
    findings = checks.validate(config)              # every finding, never raises for the config
    findings = checks.check(config, strict=False)   # raises checks.DoctorError on blocking ones

or ``verl-ascend doctor [--config-name NAME] [--strict] [overrides...]``. Its exit
status, ``DRY_RUN=1``'s and the env CLI's follow one table: :mod:`verl_ascend.checks.exits`.

Severity: ``error`` blocks the run; ``warn`` blocks only under strict (``strict=True``,
``--strict`` or ``VERL_ASCEND_DOCTOR_STRICT=1``); ``info`` never blocks. A rule the user knows
to be wrong for their case can be listed in ``VERL_ASCEND_DOCTOR_IGNORE=rule_a,rule_b``: its
findings are kept, downgraded to info, so the decision stays visible in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from verl_ascend.checks import (
    rules_async,
    rules_context,
    rules_effective,
    rules_engine,
    preflight,
    rules_fsdp,
    rules_layout,
    rules_memory,
    rules_profiling,
    rules_reward,
    rules_sampler,
    rules_sampling,
    rules_schema,
)
from verl_ascend.checks.findings import ERROR, INFO, WARN, DoctorError, Finding
from verl_ascend.checks.pipeline import CONFIG, GATE, INPUTS, stage_of
from verl_ascend.checks.view import ConfigView

STRICT_ENV = "VERL_ASCEND_DOCTOR_STRICT"
IGNORE_ENV = "VERL_ASCEND_DOCTOR_IGNORE"

ENTRY_POINT_GROUP = "verl_ascend.checks"

Rule = Callable[[ConfigView], Iterable[Finding]]
BUILTIN_RULES: tuple[Rule, ...] = (
    *preflight.RULES,
    *rules_effective.RULES,
    *rules_engine.RULES,
    *rules_reward.RULES,
    *rules_sampling.RULES,
    *rules_fsdp.RULES,
    *rules_layout.RULES,
    *rules_async.RULES,
    *rules_sampler.RULES,
    *rules_profiling.RULES,
    *rules_context.RULES,
    *rules_schema.RULES,
    *rules_memory.RULES,
)

_registered: list[Rule] = []
_entry_points_loaded = False

__all__ = [
    "DoctorError", "Finding", "ERROR", "WARN", "INFO", "BUILTIN_RULES", "rules", "register",
    "register_launch_defaults", "register_launch_engine_module", "check", "validate", "blocking", "format_report", "refusal",
]


def register(*new_rules: Rule) -> None:
    """Add rules of a backend or a recipe (idempotent: a rule registered twice runs once)."""
    for rule in new_rules:
        if rule not in _registered:
            _registered.append(rule)


def register_launch_defaults(device: str, keys: dict[str, str]) -> None:
    """Keys the ``device``'s platform fills in at launch before the checks run (key -> what fills it):
    the doctor and ``DRY_RUN=1`` note them instead of refusing (``rules_async``)."""
    rules_async.register_launch_defaults(device, keys)


def register_launch_engine_module(device: str, modes: tuple[str, ...], module: str) -> None:
    """The weight-sync engine module ``device``'s platform names at launch in ``modes`` where the user named
    none: the checks judge ``checkpoint_engine.backend`` by the names it registers (``engine_modules``)."""
    from verl_ascend.checks import engine_modules

    engine_modules.register_launch_module(device, modes, module)


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


def validate(
    config: Any, environ: Mapping[str, str] | None = None, *, inputs: bool = False, advice: bool = True
) -> list[Finding]:
    """Run the pipeline on a composed config: every finding of every rule, errors first.

    Gate rules run first; while one errs, rules that trust the config's types are skipped (a note
    says which). ``inputs=True`` adds the rules that read the run's files (the entry point's
    preflight). ``advice=False`` (``VERL_ASCEND_DOCTOR=0`` at launch) keeps only launch checks.
    ``VERL_ASCEND_DOCTOR_IGNORE=rule_a,...`` downgrades those rules' findings to notes.
    """
    view = ConfigView(config, environ)
    ignored = {r.strip() for r in view.environ.get(IGNORE_ENV, "").split(",") if r.strip()}
    stages = (GATE, CONFIG, INPUTS) if inputs else (GATE, CONFIG)
    findings: list[Finding] = []
    erred: set[str] = set()  # rule ids that reported an error
    gate_failed = False
    skipped: list[str] = []
    for stage in stages:
        for rule in rules():
            if stage_of(rule) != stage or not (advice or getattr(rule, "launch", False)):
                continue
            unmet = [need for need in getattr(rule, "needs", ()) if need in erred]
            if gate_failed and getattr(rule, "trusts_config", False):
                unmet.append("a sound config")
            if unmet:
                skipped.append(f"{getattr(rule, '__name__', rule)} (needs {', '.join(unmet)})")
                continue
            for finding in _run(rule, view):
                if finding.severity == ERROR:
                    erred.add(finding.rule)
                    gate_failed = gate_failed or stage == GATE
                if finding.rule in ignored and finding.severity != INFO:
                    finding = Finding(
                        finding.rule, INFO, f"(ignored via {IGNORE_ENV}) {finding.message}", finding.keys, finding.accepted
                    )
                findings.append(finding)
    if skipped:
        findings.append(Finding("checks_skipped", INFO, "not run until the errors above are fixed: " + "; ".join(skipped)))
    order = {ERROR: 0, WARN: 1, INFO: 2}
    return sorted(findings, key=lambda f: order[f.severity])


def _run(rule: Rule, view: ConfigView) -> list[Finding]:
    """A rule's findings; a rule that crashes is itself an error finding, never a traceback."""
    try:
        return list(rule(view))
    except Exception as exc:  # noqa: BLE001 -- any bug in a rule must refuse cleanly, naming it
        name = getattr(rule, "__name__", repr(rule))
        return [Finding("rule_crashed", ERROR, f"the check {name} failed ({type(exc).__name__}: {exc}); fix the "
                        "input it names or set VERL_ASCEND_DOCTOR_IGNORE=rule_crashed to start anyway")]


def strict_of(config: Any = None, environ: Mapping[str, str] | None = None) -> bool:
    """Warnings refuse too: ``VERL_ASCEND_DOCTOR_STRICT=1`` or ``doctor.strict`` in the config, read
    through its one declaration (``options.py::DoctorOptions``). A value of ``doctor.strict`` that is not
    accepted counts as not strict here: the ``config_types`` rule refuses it, naming the key."""
    from verl_ascend import envs
    from verl_ascend.checks.options import DoctorOptions
    from verl_ascend.sections import SectionError

    if envs.flag(STRICT_ENV, environ):
        return True
    try:
        return DoctorOptions.from_config(config).strict
    except (SectionError, ValueError):
        return False


def blocking(findings: Iterable[Finding], strict: bool) -> list[Finding]:
    """The findings that stop a run: errors, and warnings when strict."""
    stops = {ERROR, WARN} if strict else {ERROR}
    return [f for f in findings if f.severity in stops]


def check(config: Any, strict: bool = False, environ: Mapping[str, str] | None = None) -> list[Finding]:
    """Run every rule; raise DoctorError listing the blocking findings, else return all findings.

    ``strict`` is also switched on by ``VERL_ASCEND_DOCTOR_STRICT=1`` in ``environ`` or ``doctor.strict``.
    """
    strict = bool(strict) or strict_of(config, environ)
    findings = validate(config, environ)
    stops = blocking(findings, strict)
    if stops:
        raise DoctorError(stops, strict=strict)
    return findings


def refusal(findings: Iterable[Finding], strict: bool) -> DoctorError | None:
    """The error that refuses a start (every blocking finding), or None when the run may start."""
    stops = blocking(findings, strict)
    return DoctorError(stops, strict=strict) if stops else None


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
