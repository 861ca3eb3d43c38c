"""Regression gate: ``verl-ascend gate METRICS --baseline BASELINE.yaml``.

Why: a nightly run that trains a little worse, or a little slower, than last week's still exits 0,
and nobody reads its curves. The gate reads the run's metrics (upstream's JSON lines, written by
``trainer.logger`` ``file``), reduces each metric the baseline names over the baseline's step
window (the mean by default), and compares it with the stored value within the stored tolerance,
in the direction that is a regression for that metric (a drop of reward, a rise of step time or
memory; ``either`` where any change is suspect). It prints one row per metric -- baseline, run,
difference, tolerance, verdict --, draws the run's per-step values against the baseline band
(``regression_gate.png`` next to the metrics unless told otherwise), and exits with the checks' one
table (:mod:`verl_ascend.checks.exits`):

* 0 ``OK``: no gated metric regressed;
* 2 ``REFUSED``: at least one gated metric regressed (each is named in the table on stdout, and the
  JSON's ``passed`` is false), or the inputs cannot be compared: a missing or damaged file, a baseline
  key that is unknown or malformed, a window with steps the run does not have, a metric the run does
  not log (unless the baseline marks it ``optional``); each culprit is named on stderr, nothing is
  written. A torn last line (a run cut off while writing it) whose step lies outside the window is
  not a culprit: it is dropped, and a note above the table says so;
* 1 ``FAILED``: the command itself failed (a file it could not write, a traceback): no verdict.

Metrics carry a ``group``; the baseline's ``gated`` list (or ``--gate``) says which groups can fail
the gate. The others are still compared and shown, marked "not gated": speed on a shared CI
machine is information, not a verdict. Baseline schema: docs/ascend_tutorial/regression_gate.md.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.cli import parser
from verl_ascend.memory import measured
from verl_ascend.report import plots
from verl_ascend.report.metrics_log import read_step_values, torn_tail
from verl_ascend.report.problems import InputFormatError
from verl_ascend.report.report import _write_text_atomic

SCHEMA = "verl-ascend/regression-baseline/v1"
PLOT_NAME = "regression_gate.png"

_TOP_KEYS = {"schema": "the schema name", "description": "free text", "window": "{first: N, last: M}",
             "gated": "a list of groups", "metrics": "a mapping of metric name -> spec"}
_METRIC_KEYS = ("value", "group", "regression", "abs", "rel", "reduce", "optional", "note")
REGRESSIONS = ("drop", "rise", "either")  # the direction that is a regression
REDUCERS = {"mean": lambda v: sum(v) / len(v), "max": max, "min": min, "last": lambda v: v[-1]}


class GateInputError(ValueError):
    """The run cannot be compared with the baseline; the message names the culprit."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    value: float
    group: str
    regression: str
    tolerance: float
    relative: bool  # tolerance is a fraction of |value|
    reduce: str = "mean"
    optional: bool = False

    @property
    def width(self) -> float:
        """The tolerance in the metric's unit."""
        return self.tolerance * abs(self.value) if self.relative else self.tolerance

    def allowed(self) -> tuple[float, float]:
        """(lowest, highest) run value that passes; one side is unbounded for a one-sided metric."""
        width = self.width
        low = -math.inf if self.regression == "rise" else self.value - width
        high = math.inf if self.regression == "drop" else self.value + width
        return low, high

    def tolerance_text(self) -> str:
        sign = {"drop": "-", "rise": "+", "either": "±"}[self.regression]
        return f"{sign}{100 * self.tolerance:g}%" if self.relative else f"{sign}{self.tolerance:g}"


@dataclass(frozen=True)
class Baseline:
    path: str
    window: tuple[int, int]
    gated: tuple[str, ...]
    metrics: tuple[MetricSpec, ...]
    description: str = ""


# ================================================================================================ baseline
def _where(path: str, key: str) -> str:
    return f"{path}: {key}"


def _number(path: str, key: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GateInputError(f"{_where(path, key)} is {value!r}; accepted: a finite number")
    if positive and value < 0:
        raise GateInputError(f"{_where(path, key)} is {value!r}; accepted: a number >= 0")
    return float(value)


def _metric(path: str, name: str, spec: Any, groups_seen: set[str]) -> MetricSpec:
    key = f"metrics.{name}"
    if not isinstance(spec, dict):
        raise GateInputError(f"{_where(path, key)} is {spec!r}; accepted: a mapping with {', '.join(_METRIC_KEYS)}")
    unknown = sorted(set(spec) - set(_METRIC_KEYS))
    if unknown:
        raise GateInputError(f"{_where(path, key)}: unknown key(s) {', '.join(unknown)}; accepted: "
                             f"{', '.join(_METRIC_KEYS)}")
    for required in ("value", "group", "regression"):
        if required not in spec:
            raise GateInputError(f"{_where(path, key)}: '{required}' is missing")
    if ("abs" in spec) == ("rel" in spec):
        raise GateInputError(f"{_where(path, key)}: give exactly one tolerance, 'abs' (same unit as the metric) "
                             f"or 'rel' (a fraction of the baseline value)")
    kind = "rel" if "rel" in spec else "abs"
    value = _number(path, f"{key}.value", spec["value"])
    tolerance = _number(path, f"{key}.{kind}", spec[kind], positive=True)
    if kind == "rel" and value == 0:
        raise GateInputError(f"{_where(path, key)}: 'rel' needs a non-zero value (it is a fraction of it); use 'abs'")
    if spec["regression"] not in REGRESSIONS:
        raise GateInputError(f"{_where(path, key)}.regression is {spec['regression']!r}; accepted: "
                             f"drop (lower is worse), rise (higher is worse), either")
    reduce = spec.get("reduce", "mean")
    if reduce not in REDUCERS:
        raise GateInputError(f"{_where(path, key)}.reduce is {reduce!r}; accepted: {', '.join(REDUCERS)}")
    group, optional = spec["group"], spec.get("optional", False)
    if not isinstance(group, str) or not group:
        raise GateInputError(f"{_where(path, key)}.group is {group!r}; accepted: a name (e.g. correctness, speed)")
    if not isinstance(optional, bool):
        raise GateInputError(f"{_where(path, key)}.optional is {optional!r}; accepted: true or false")
    groups_seen.add(group)
    return MetricSpec(name, value, group, spec["regression"], tolerance, kind == "rel", reduce, optional)


def _window(path: str, raw: Any) -> tuple[int, int]:
    ok = isinstance(raw, dict) and set(raw) == {"first", "last"} and all(
        isinstance(raw[k], int) and not isinstance(raw[k], bool) for k in raw)
    if not ok or raw["first"] > raw["last"]:
        raise GateInputError(f"{_where(path, 'window')} is {raw!r}; accepted: {{first: N, last: M}}, integer steps, "
                             f"N <= M (both included)")
    return raw["first"], raw["last"]


def load_baseline(path: str | Path) -> Baseline:
    """Read and check a baseline file; every fault names its key and what would be accepted."""
    import yaml

    path = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except FileNotFoundError:
        raise GateInputError(f"baseline {path} not found") from None
    except OSError as e:
        raise GateInputError(f"baseline {path}: cannot read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise GateInputError(f"baseline {path}: not YAML ({e})") from None
    if not isinstance(raw, dict):
        raise GateInputError(f"baseline {path}: expected a mapping with keys {', '.join(_TOP_KEYS)}")
    unknown = sorted(set(map(str, raw)) - set(_TOP_KEYS))
    if unknown:
        raise GateInputError(f"{_where(path, ', '.join(unknown))}: unknown key(s); accepted: "
                             + "; ".join(f"{k} ({v})" for k, v in _TOP_KEYS.items()))
    if raw.get("schema") != SCHEMA:
        raise GateInputError(f"{_where(path, 'schema')} is {raw.get('schema')!r}; accepted: {SCHEMA}")
    for key in ("window", "metrics"):
        if key not in raw:
            raise GateInputError(f"{_where(path, key)} is missing ({_TOP_KEYS[key]})")
    if not isinstance(raw["metrics"], dict) or not raw["metrics"]:
        raise GateInputError(f"{_where(path, 'metrics')} is {raw['metrics']!r}; accepted: {_TOP_KEYS['metrics']}")
    groups: set[str] = set()
    metrics = tuple(_metric(path, str(name), spec, groups) for name, spec in raw["metrics"].items())
    gated = raw.get("gated", sorted(groups))
    if not isinstance(gated, list) or not all(isinstance(g, str) for g in gated):
        raise GateInputError(f"{_where(path, 'gated')} is {gated!r}; accepted: a list of groups")
    _check_groups(path, "gated", gated, groups)
    return Baseline(path, _window(path, raw["window"]), tuple(gated), metrics, str(raw.get("description") or ""))


def _check_groups(path: str, key: str, names, groups: set[str]) -> None:
    unknown = sorted(set(names) - groups)
    if unknown:
        raise GateInputError(f"{_where(path, key)}: group(s) {', '.join(unknown)} have no metric; groups of its "
                             f"metrics: {', '.join(sorted(groups))}")


# ================================================================================================ compare
@dataclass(frozen=True)
class Row:
    spec: MetricSpec
    gated: bool
    run: Optional[float]  # None: optional metric the run does not log
    steps: tuple[int, ...]  # window steps that have the metric

    @property
    def diff(self) -> Optional[float]:
        return None if self.run is None else self.run - self.spec.value

    @property
    def verdict(self) -> str:
        if self.run is None:
            return "skipped (optional, not logged)"
        low, high = self.spec.allowed()
        if not math.isfinite(self.run) or not low <= self.run <= high:
            word = "REGRESSED"
        elif abs(self.diff) > self.spec.width:  # one-sided, moved the good way by more than the tolerance
            word = "improved"
        else:
            word = "ok"
        return word if self.gated else f"{word.lower()} (not gated)"

    @property
    def regressed(self) -> bool:
        return self.gated and self.verdict == "REGRESSED"


def _missing_metric(name: str, window: tuple[int, int], values: dict[int, dict[str, float]], path: str) -> str:
    logged = sorted({k for d in values.values() for k in d})
    near = difflib.get_close_matches(name, logged, n=3, cutoff=0.8)
    hint = f"; close names in the run: {', '.join(near)}" if near else ""
    return (f"{path}: metric {name!r} of the baseline is not logged in steps {window[0]}-{window[1]}{hint} "
            f"(mark it 'optional: true' in the baseline if the run may lack it)")


def compare(values: dict[int, dict[str, float]], baseline: Baseline, metrics_path: str,
            gate: Optional[tuple[str, ...]] = None) -> list[Row]:
    """One row per baseline metric; GateInputError when the window or a required metric is not in the run."""
    first, last = baseline.window
    window = [s for s in range(first, last + 1)]
    missing = [s for s in window if s not in values]
    if missing:
        have = f"steps {min(values)}-{max(values)}" if values else "no steps"
        raise GateInputError(f"{metrics_path}: the baseline's window (steps {first}-{last}, {baseline.path}) needs "
                             f"step(s) {_ranges(missing)}, which the run does not have (it has {have}: "
                             f"{len(values)} record(s))")
    gated = baseline.gated if gate is None else gate
    rows = []
    for spec in baseline.metrics:
        steps = tuple(s for s in window if spec.name in values[s])
        if not steps:
            if not spec.optional:
                raise GateInputError(_missing_metric(spec.name, baseline.window, values, metrics_path))
            rows.append(Row(spec, spec.group in gated, None, ()))
            continue
        found = [values[s][spec.name] for s in steps]
        # NaN or inf on any step of the window fails the metric, whatever the reduction would pick.
        run = REDUCERS[spec.reduce](found) if all(map(math.isfinite, found)) else math.nan
        rows.append(Row(spec, spec.group in gated, run, steps))
    return rows


def _ranges(steps: list[int]) -> str:
    out, start = [], steps[0]
    for prev, cur in zip(steps, steps[1:] + [None]):
        if cur != prev + 1:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(out)


# ================================================================================================ output
def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.4g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def _diff_text(row: Row) -> str:
    if row.diff is None:
        return "-"
    text = f"{row.diff:+.4g}" if math.isfinite(row.diff) else str(row.diff)
    if row.spec.relative and math.isfinite(row.diff):
        text += f" ({100 * row.diff / abs(row.spec.value):+.1f}%)"
    return text


def render_table(rows: list[Row], baseline: Baseline, metrics_path: str) -> str:
    first, last = baseline.window
    head = ("metric", "group", "reduce", "baseline", "run", "difference", "tolerance", "verdict")
    body = [(r.spec.name, r.spec.group, r.spec.reduce, _fmt(r.spec.value), _fmt(r.run), _diff_text(r),
             r.spec.tolerance_text(), r.verdict) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [f"regression gate: {metrics_path}", f"baseline: {baseline.path}, steps {first}-{last}, gated: "
           f"{', '.join(sorted({r.spec.group for r in rows if r.gated})) or 'nothing'}", "", line(head),
           line(["-" * w for w in widths]), *map(line, body), ""]
    bad = [r.spec.name for r in rows if r.regressed]
    out.append(f"gate: FAIL: {len(bad)} regressed: {', '.join(bad)}" if bad else
               f"gate: PASS ({sum(r.gated and r.run is not None for r in rows)} gated metric(s) within tolerance)")
    return "\n".join(out)


def to_json(rows: list[Row], baseline: Baseline, metrics_path: str) -> dict:
    return {
        "schema": "verl-ascend/regression-gate/v1",
        "metrics_file": metrics_path,
        "baseline": baseline.path,
        "window": list(baseline.window),
        "passed": not any(r.regressed for r in rows),
        "rows": [{"metric": r.spec.name, "group": r.spec.group, "gated": r.gated, "reduce": r.spec.reduce,
                  "baseline": r.spec.value, "run": r.run, "difference": r.diff, "tolerance": r.spec.tolerance_text(),
                  "allowed": [None if not math.isfinite(x) else x for x in r.spec.allowed()],
                  "steps": list(r.steps), "verdict": r.verdict} for r in rows],
    }


# ================================================================================================ CLI
def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = parser(
        "gate",
        "Compare a run's metrics (upstream's metrics JSON lines) with a stored baseline over its step window:\n"
        "one row per metric (baseline, run, difference, tolerance, verdict) and a plot against the baseline band.",
        ["verl-ascend gate metrics.jsonl --baseline my_baseline.yaml --gate correctness --gate speed --json gate.json"],
    )
    ap.add_argument("metrics", type=Path, help="the run's metrics .jsonl (trainer.logger file; VERL_FILE_LOGGER_PATH)")
    ap.add_argument("--baseline", type=Path, required=True, help="baseline YAML (docs/ascend_tutorial/regression_gate.md)")
    ap.add_argument("--gate", action="append", default=None, metavar="GROUP",
                    help="groups whose regressions fail the gate, replacing the baseline's 'gated' (repeatable)")
    ap.add_argument("--plot", type=Path, default=None, help=f"PNG to write (default: {PLOT_NAME} next to METRICS)")
    ap.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison as JSON here")
    ap.add_argument("--run-config", type=Path, default=None,
                    help="the run's composed config (.hydra/config.yaml): adds the memory plan's trainer peak next to "
                         "the measured perf/max_memory_*_gb (never gated)")
    return ap.parse_args(argv)


def run_gate(args: argparse.Namespace) -> tuple[int, str]:
    """(exit status, text to print); raises GateInputError on input that cannot be compared."""
    baseline = load_baseline(args.baseline)
    if args.gate is not None:
        _check_groups(baseline.path, "--gate", args.gate, {m.group for m in baseline.metrics})
    metrics_path = str(args.metrics)
    if not args.metrics.is_file():
        raise GateInputError(f"metrics file {metrics_path} not found; expected the run's JSON lines "
                             f"(trainer.logger file, VERL_FILE_LOGGER_PATH)")
    try:
        values, problems = read_step_values(args.metrics)
    except InputFormatError as e:
        raise GateInputError(str(e)) from None
    problems, dropped = _drop_torn_tail(args.metrics, problems, baseline.window)
    if problems:  # a gate never passes on a half-read run
        raise GateInputError("; ".join(map(str, problems)))
    rows = compare(values, baseline, metrics_path, None if args.gate is None else tuple(args.gate))
    text = dropped + render_table(rows, baseline, metrics_path)
    memory = _memory(args.run_config, values)
    if memory:
        text += "\n" + "\n".join(measured.lines(memory))
    if args.json:
        data = {**to_json(rows, baseline, metrics_path), **({"memory": memory} if memory else {})}
        _write_text_atomic(args.json, json.dumps(data, indent=2) + "\n")
        text += f"\njson: {args.json}"
    if not args.no_plot:
        target = args.plot or args.metrics.with_name(PLOT_NAME)
        try:
            text += f"\nplot: {plots.gate_comparison(rows, values, baseline.window, target)}"
        except Exception as e:  # the plot is a view of the table: never lose the verdict over it
            print(f"warning: could not draw {target} ({type(e).__name__}: {e})", file=sys.stderr)
    return (REFUSED if any(r.regressed for r in rows) else OK), text


def _memory(run_config: Optional[Path], values: dict) -> dict:
    """The memory plan of the run's config against its measured peaks (shown, never gated); {} without a config."""
    if run_config is None:
        return {}
    import yaml

    try:
        tree = yaml.safe_load(run_config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise GateInputError(f"--run-config {run_config}: cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(tree, dict):
        raise GateInputError(f"--run-config {run_config}: expected the run's composed config, a mapping")
    return measured.compare_config(tree, values)


def _drop_torn_tail(path: Path, problems: list, window: tuple[int, int]) -> tuple[list, str]:
    """(problems left, a note): a torn last line -- what a crashed run leaves -- whose step lies outside the window
    compares nothing and is dropped with a note; one inside the window, or of a step it never wrote, still refuses."""
    torn = torn_tail(path) if problems else None
    if torn is None or torn.step is None or window[0] <= torn.step <= window[1]:
        return problems, ""
    left = [p for p in problems if p.line != torn.line]
    if len(left) == len(problems):
        return problems, ""
    return left, (f"note: {path}:{torn.line}: dropped the last line, cut off while writing step {torn.step} "
                  f"(outside the window, steps {window[0]}-{window[1]})\n")


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    try:
        status, text = run_gate(args)
    except GateInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return REFUSED
    except OSError as e:  # the comparison was made, but its JSON could not be written: no verdict given
        print(f"error: cannot write {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return FAILED
    print(text)
    return status
