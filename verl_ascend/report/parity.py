"""Parity of two arms of runs: ``verl-ascend parity --baseline RUN... --candidate RUN... --margin M.yaml``.

Why: "async keeps accuracy" is a claim about distributions of runs, not about two curves. One run of
each mode differs by as much as the effect (verl's own published async results: single runs whose
spread across GPU counts is the size of the async-sync gap). This command compares two *arms* of at
least three runs each (upstream's metrics JSON lines, one file per run) the way a non-inferiority test
does: the primary metric per run reduced to a few statistics -- ``final`` (mean of the last
``final_window`` steps), ``max``, ``auc`` (area under the curve per step, in the metric's unit) and,
on request, ``auc_time`` (the same by wall-clock over the time every run reached) --, the difference
candidate - baseline of the arm means with a seeded bootstrap interval over runs, and the verdict:
non-inferior when the interval's lower bound is at or above -margin for every gated statistic.

Runs are aligned by step (the steps every run of both arms logged) and by wall-clock (each run's
cumulative ``timing_s/step``: the trainer's own clock, without the start-up). Each run's mode, seed and
staleness settings come from its own records (``resume.jsonl`` next to the metrics file: the recipe
records ``trainer_mode`` and ``settings`` at each start; ``data_order.json``'s seed otherwise): runs of
one arm in different modes or staleness bounds, or two runs with the same seed, are refused (they are
not an arm of independent runs). Off-policy diagnostics (staleness, samples evicted as too stale,
``rollout_corr/*``, entropy, response length, gradient norm) are shown per step, and an arm whose last third of steps has a
non-finite value, a gradient norm above ``instability.grad_norm_ratio`` times its earlier median, or a
metric more than twice the margin below its peak is flagged as unstable late (a flag, not a verdict).

Exit status (:mod:`verl_ascend.checks.exits`): 0 non-inferior; 2 a statistic's lower bound below
-margin (named with its metric), or input that cannot be compared (a missing file, fewer than 3 runs,
a metric not logged by every run, arms on different metrics: each culprit named); 1 the command failed.
Margin file schema: docs/ascend_tutorial/async_training.md ("Parity").
"""

from __future__ import annotations

import difflib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from verl_ascend import trainer_mode
from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.cli import parser
from verl_ascend.report.metrics_log import read_step_values
from verl_ascend.report.problems import InputFormatError

SCHEMA = "verl-ascend/parity-margin/v1"
MIN_RUNS = 3
STATISTICS = ("final", "max", "auc", "auc_time")
# The primary metric when the margin file says ``metric: auto``: validation accuracy where every run logs
# it, else the accuracy of every sampled response (the recipe's, with dynamic sampling), else the batch's.
SAMPLED = ("reward_extra/acc/sampled_mean", "reward_extra/acc/mean")
STALENESS = "training/off_policy/trajectory_staleness/mean"
# evicted_samples: trajectories upstream's replay buffer dropped as staler than the bound (rollout work spent for nothing)
DIAGNOSTICS = (STALENESS, "training/off_policy/evicted_samples", "actor/entropy", "response_length/mean",
               "actor/grad_norm")
_KEYS = {"schema": "the schema name", "description": "free text", "metric": "auto or a metric name",
         "margin": "a number > 0, in the metric's unit", "statistics": f"a list of {', '.join(STATISTICS)}",
         "final_window": "an integer >= 1", "confidence": "a number in (0.5, 1)",
         "resamples": "an integer >= 100", "seed": "an integer",
         "instability": "{grad_norm_ratio: number > 1}"}


class ParityInputError(ValueError):
    """The arms cannot be compared; the message names the culprit (file, key) and what is accepted."""


# ================================================================================================ margin
@dataclass(frozen=True)
class Margin:
    path: str
    margin: float  # in the metric's unit: non-inferior when every gated lower bound >= -margin
    metric: str = "auto"  # or a metric name every run logs
    statistics: tuple[str, ...] = ("final", "max", "auc")  # the gated ones; all of STATISTICS are shown
    final_window: int = 3  # "final" is the mean of this many last steps
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0  # of the bootstrap: the same files give the same interval
    grad_norm_ratio: float = 3.0  # late gradient norm over its earlier median that flags instability
    description: str = ""


def _check(path: str, key: str, ok: bool, value: Any) -> None:
    if not ok:
        raise ParityInputError(f"{path}: {key} is {value!r}; accepted: {_KEYS[key.split('.')[0]]}")


def load_margin(path: str) -> Margin:
    """Read and check a margin file; every fault names its key and what would be accepted."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParityInputError(f"margin file {path} not found") from None
    except (OSError, yaml.YAMLError) as e:
        raise ParityInputError(f"margin file {path}: cannot read ({e})") from None
    if not isinstance(raw, dict):
        raise ParityInputError(f"margin file {path}: expected a mapping with keys {', '.join(_KEYS)}")
    unknown = sorted(set(map(str, raw)) - set(_KEYS))
    if unknown:
        raise ParityInputError(f"{path}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(_KEYS)}")
    _check(path, "schema", raw.get("schema") == SCHEMA, raw.get("schema"))
    _check(path, "margin", _num(raw.get("margin")) and raw["margin"] > 0, raw.get("margin"))
    got = {k: raw[k] for k in ("metric", "final_window", "confidence", "resamples", "seed") if k in raw}
    _check(path, "metric", isinstance(got.get("metric", "auto"), str), got.get("metric"))
    _check(path, "final_window", _int(got.get("final_window", 1), 1), got.get("final_window"))
    _check(path, "confidence", _num(got.get("confidence", 0.9)) and 0.5 < got.get("confidence", 0.9) < 1,
           got.get("confidence"))
    _check(path, "resamples", _int(got.get("resamples", 100), 100), got.get("resamples"))
    _check(path, "seed", _int(got.get("seed", 0), None), got.get("seed"))
    stats = raw.get("statistics", list(Margin.statistics))
    _check(path, "statistics", isinstance(stats, list) and bool(stats) and set(stats) <= set(STATISTICS), stats)
    inst = raw.get("instability", {})
    _check(path, "instability", isinstance(inst, dict) and set(inst) <= {"grad_norm_ratio"}
           and _num(inst.get("grad_norm_ratio", 3.0)) and inst.get("grad_norm_ratio", 3.0) > 1, inst)
    return Margin(path, float(raw["margin"]), statistics=tuple(stats), description=str(raw.get("description") or ""),
                  grad_norm_ratio=float(inst.get("grad_norm_ratio", 3.0)), **got)


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(x: Any, low: Optional[int]) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and (low is None or x >= low)


# ================================================================================================ runs
@dataclass
class Run:
    path: str
    values: dict[int, dict[str, float]]
    mode: Optional[str] = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def seed(self) -> Any:
        return self.settings.get("data.seed")

    def elapsed(self) -> dict[int, float]:
        """Seconds of training at the end of each step: the cumulative ``timing_s/step``."""
        total, out = 0.0, {}
        for step, data in self.values.items():
            total += data.get("timing_s/step", 0.0)
            out[step] = total
        return out


def metrics_path(path: str) -> Path:
    """A metrics file, or the one ``metrics.jsonl`` in a run folder (``<out>/<experiment>/metrics.jsonl`` too)."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.exists():
        raise ParityInputError(f"run {path} not found; accepted: a metrics .jsonl file or a run folder holding one")
    found = sorted(p.glob("metrics.jsonl")) or sorted(p.glob("*/metrics.jsonl"))
    if len(found) != 1:
        raise ParityInputError(f"run folder {path} holds {len(found)} metrics.jsonl files "
                               f"({', '.join(map(str, found)) or 'none'}); accepted: exactly one")
    return found[0]


def read_run(path: str) -> Run:
    """One run: its metrics, and the mode and settings its own records name (none when it has no records)."""
    metrics = metrics_path(path)
    try:
        values, problems = read_step_values(metrics)
    except InputFormatError as e:
        raise ParityInputError(str(e)) from None
    if problems:
        raise ParityInputError("; ".join(map(str, problems)))
    run = Run(str(metrics), values)
    resume = metrics.parent / "resume.jsonl"
    if resume.is_file():
        lines = [json.loads(x) for x in resume.read_text().splitlines() if x.strip().startswith("{")]
        if lines:
            run.mode = lines[-1].get(trainer_mode.FIELD)
            run.settings = dict(lines[-1].get("settings") or {})
    order = metrics.parent / "data_order.json"
    if "data.seed" not in run.settings and order.is_file():
        eras = json.loads(order.read_text()).get("eras") or [{}]
        run.settings["data.seed"] = eras[-1].get("seed")
    return run


# ================================================================================================ arms
@dataclass
class Arm:
    name: str
    runs: list[Run]
    metric: str
    steps: list[int]  # steps every run logged the metric

    def matrix(self, key: str, steps: list[int]) -> np.ndarray:
        """runs x steps of ``key`` (NaN where a run lacks it)."""
        return np.array([[r.values.get(s, {}).get(key, np.nan) for s in steps] for r in self.runs], dtype=float)

    def label(self) -> str:
        run = self.runs[0]
        bound = run.settings.get("trainer.v1.sampler.max_off_policy_threshold")
        what = [run.mode] if run.mode else []
        if run.mode and run.mode != "sync" and bound is not None:
            what.append(f"staleness bound {int(bound) - 1}")
        if run.settings.get("algorithm.rollout_correction.rollout_is") or run.settings.get(
                "algorithm.rollout_correction.rollout_rs"):
            what.append("rollout correction")
        return f"{self.name} ({', '.join(what)})" if what else self.name


def resolve_metric(runs: list[Run], wanted: str) -> str:
    """The primary metric every run logs: ``wanted``, or with ``auto`` validation accuracy, else sampled accuracy."""
    logged = [set().union(*r.values.values()) for r in runs]
    if wanted != "auto":
        for run, keys in zip(runs, logged):
            if wanted not in keys:
                near = difflib.get_close_matches(wanted, sorted(keys), n=3, cutoff=0.7)
                raise ParityInputError(f"{run.path}: metric {wanted!r} is not logged"
                                       + (f"; close names: {', '.join(near)}" if near else ""))
        return wanted
    common = set.intersection(*logged)
    val = sorted(k for k in common if k.startswith("val-core/") and "/acc/" in k)
    for key in val[:1] + list(SAMPLED):
        if key in common:
            return key
    lacking = [r.path for r, keys in zip(runs, logged) if not any(k in keys for k in SAMPLED)]
    raise ParityInputError(f"no primary metric every run logs: {', '.join(lacking) or 'the runs'} lack "
                           f"validation accuracy (val-core/*/acc/*) and {' and '.join(SAMPLED)}")


def _check_arm(name: str, runs: list[Run], min_runs: int = MIN_RUNS) -> None:
    """Runs of one arm: at least ``min_runs``, one mode and staleness bound, no seed twice."""
    if len(runs) < min_runs:
        raise ParityInputError(f"arm {name}: {len(runs)} run(s) ({', '.join(r.path for r in runs) or 'none'}); "
                               f"accepted: at least {MIN_RUNS} runs an arm (one run's noise is the size of the effect)")
    def bound(run: Run) -> Any:  # sync samples on-policy: its replay buffer's bound never acts
        return None if run.mode == "sync" else run.settings.get("trainer.v1.sampler.max_off_policy_threshold")

    for what, get in (("trainer mode", lambda r: r.mode), ("staleness bound", bound)):
        seen = {get(r) for r in runs if get(r) is not None}
        if len(seen) > 1:
            raise ParityInputError(f"arm {name}: runs in different {what}s: " + ", ".join(
                f"{r.path} ({get(r)})" for r in runs) + "; accepted: one setting an arm")
    seeds: dict[Any, str] = {}
    for r in runs:
        if r.seed is not None and r.seed in seeds:
            raise ParityInputError(f"arm {name}: {seeds[r.seed]} and {r.path} both ran with seed {r.seed}: not "
                                   f"independent runs; accepted: a different data.seed per run")
        seeds.setdefault(r.seed, r.path)


def load_arm(name: str, paths: list[str], spec: Margin, min_runs: int = MIN_RUNS) -> Arm:
    """An arm of runs; ``min_runs`` below MIN_RUNS only for a study cut short (its figures are then indicative)."""
    runs = [read_run(p) for p in paths]
    _check_arm(name, runs, min_runs)
    metric = resolve_metric(runs, spec.metric)
    steps = sorted(set.intersection(*[{s for s, d in r.values.items() if metric in d} for r in runs]))
    return Arm(name, runs, metric, steps)


# ================================================================================================ compare
@dataclass
class Diff:
    arm_means: tuple[float, float]  # (baseline, candidate)
    delta: float
    low: float
    high: float


@dataclass
class Comparison:
    metric: str
    steps: list[int]
    diffs: dict[str, Diff]
    failed: list[str]
    instability: list[str]

    @property
    def passed(self) -> bool:
        return not self.failed


def run_statistics(arm: Arm, steps: list[int], spec: Margin, horizon: float) -> dict[str, np.ndarray]:
    """Per run of ``arm``: each statistic of the primary metric over ``steps`` (and wall-clock up to ``horizon``)."""
    m = arm.matrix(arm.metric, steps)
    x = np.array(steps, dtype=float)
    span = x[-1] - x[0]
    auc = np.trapezoid(m, x, axis=1) / span if span > 0 else m[:, 0]
    out = {"final": m[:, -spec.final_window:].mean(axis=1), "max": m.max(axis=1), "auc": auc}
    out["auc_time"] = np.array([_time_area(r, arm.metric, horizon) for r in arm.runs])
    return out


def _time_area(run: Run, metric: str, horizon: float) -> float:
    """Mean of the metric over [0, horizon] s of training, each step's value held from its end to the next."""
    _, values = by_time(run, metric, np.linspace(0.0, horizon, 200))
    return float(np.nanmean(values))


def by_time(run: Run, metric: str, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The metric on a wall-clock grid: the last value logged at or before each time (before the first step
    ends, that step's value: what the starting policy sampled)."""
    ends = run.elapsed()
    steps = [s for s in ends if metric in run.values[s]]
    t = np.array([ends[s] for s in steps])
    v = np.array([run.values[s][metric] for s in steps])
    idx = np.searchsorted(t, grid, side="right") - 1
    return grid, np.where(idx >= 0, v[np.maximum(idx, 0)], v[0] if len(v) else np.nan)


def horizon(*arms: Arm) -> float:
    """The wall-clock every run of every arm reached."""
    return min(max(r.elapsed().values()) for a in arms for r in a.runs)


def bootstrap(base: np.ndarray, cand: np.ndarray, spec: Margin, rng: np.random.Generator) -> Diff:
    """Candidate - baseline of the arm means, with a percentile interval resampling runs within each arm."""
    b = base[rng.integers(0, len(base), (spec.resamples, len(base)))].mean(axis=1)
    c = cand[rng.integers(0, len(cand), (spec.resamples, len(cand)))].mean(axis=1)
    tail = 100 * (1 - spec.confidence) / 2
    low, high = np.percentile(c - b, [tail, 100 - tail])
    return Diff((float(base.mean()), float(cand.mean())), float(cand.mean() - base.mean()), float(low), float(high))


def compare(base: Arm, cand: Arm, spec: Margin) -> Comparison:
    if base.metric != cand.metric:
        raise ParityInputError(f"the arms' primary metrics differ: {base.name} logs {base.metric!r} "
                               f"({base.runs[0].path}), {cand.name} {cand.metric!r} ({cand.runs[0].path}); accepted: "
                               f"runs logging the same metric (name it with 'metric:' in {spec.path})")
    steps = sorted(set(base.steps) & set(cand.steps))
    if len(steps) < spec.final_window + 1:
        raise ParityInputError(f"arms {base.name} and {cand.name} share {len(steps)} step(s) with {base.metric!r} "
                               f"({base.runs[0].path}, {cand.runs[0].path}); accepted: at least "
                               f"{spec.final_window + 1} (final_window + 1)")
    rng = np.random.default_rng(spec.seed)
    t = horizon(base, cand)
    sb, sc = run_statistics(base, steps, spec, t), run_statistics(cand, steps, spec, t)
    diffs = {k: bootstrap(sb[k], sc[k], spec, rng) for k in STATISTICS}
    failed = [f"{base.metric} {k}" for k in spec.statistics if not diffs[k].low >= -spec.margin]
    return Comparison(base.metric, steps, diffs, failed, instability(cand, steps, spec))


def instability(arm: Arm, steps: list[int], spec: Margin) -> list[str]:
    """Why the arm looks unstable over its last third of steps (empty: it does not)."""
    cut = max(1, (2 * len(steps)) // 3)
    early, late = steps[:cut], steps[cut:]
    if not late:
        return []
    why = []
    metric = arm.matrix(arm.metric, steps)
    grad = arm.matrix("actor/grad_norm", steps)
    if not np.isfinite(metric[:, cut:]).all() or (np.isfinite(grad).any() and not np.isfinite(grad[:, cut:]).all()):
        why.append(f"non-finite {arm.metric} or actor/grad_norm after step {early[-1]}")
    if np.isfinite(grad).any():
        before, after = np.nanmedian(grad[:, :cut]), np.nanmean(grad[:, cut:])
        if after > spec.grad_norm_ratio * before:
            why.append(f"actor/grad_norm {after:.3g} after step {early[-1]}, {after / before:.1f}x its earlier median")
    curve = np.nanmean(metric, axis=0)
    drop = float(np.nanmax(curve) - np.nanmean(curve[-spec.final_window:]))
    if drop > 2 * spec.margin:
        why.append(f"{arm.metric} ends {drop:.3f} below its peak (over 2x the margin)")
    return why


def diagnostics(arm: Arm, steps: list[int]) -> dict[str, list[float]]:
    """Per step, the arm's mean of each off-policy diagnostic it logs (``rollout_corr/*`` included)."""
    logged = set().union(*[d.keys() for r in arm.runs for d in r.values.values()])
    keys = [k for k in DIAGNOSTICS if k in logged] + sorted(k for k in logged if k.startswith("rollout_corr/"))
    out = {}
    for key in keys:
        with np.errstate(all="ignore"), _quiet():
            out[key] = [None if not math.isfinite(v) else round(float(v), 6) for v in np.nanmean(arm.matrix(key, steps), 0)]
    return out


class _quiet:
    """numpy warns on a step no run logged (an all-NaN mean): that step is shown as missing, not an error."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def steps_per_s(arm: Arm) -> float:
    """Steady-state steps/s over the arm's runs (step 1 carries the start-up and is left out)."""
    times = [d["timing_s/step"] for r in arm.runs for s, d in r.values.items() if s > 1 and "timing_s/step" in d]
    return len(times) / sum(times) if times else float("nan")


def mean_staleness(arm: Arm) -> float:
    values = [d[STALENESS] for r in arm.runs for d in r.values.values() if STALENESS in d]
    return float(np.mean(values)) if values else 0.0


# ================================================================================================ output
def render(base: Arm, cand: Arm, cmp: Comparison, spec: Margin) -> str:
    lines = [f"parity: {cand.label()} against {base.label()}",
             f"primary metric: {cmp.metric}; steps {cmp.steps[0]}-{cmp.steps[-1]} ({len(cmp.steps)} aligned); "
             f"margin {spec.margin:g} ({spec.path}); {100 * spec.confidence:g} % bootstrap over runs, "
             f"{spec.resamples} resamples, seed {spec.seed}"]
    for arm in (base, cand):
        lines.append(f"  {arm.name}: {len(arm.runs)} runs, seeds {[r.seed for r in arm.runs]}, "
                     f"{steps_per_s(arm):.3f} steps/s, mean staleness {mean_staleness(arm):.2f}")
    lines.append(f"{'statistic':10}{'baseline':>10}{'candidate':>11}{'difference':>12}{'interval':>22}  verdict")
    for k in STATISTICS:
        d = cmp.diffs[k]
        gated = k in spec.statistics
        verdict = ("ok" if d.low >= -spec.margin else "BELOW MARGIN") if gated else "not gated"
        lines.append(f"{k:10}{d.arm_means[0]:10.4f}{d.arm_means[1]:11.4f}{d.delta:+12.4f}"
                     f"{f'[{d.low:+.4f}, {d.high:+.4f}]':>22}  {verdict}")
    lines.append(_diag_table(base, cand, cmp.steps))
    flag = "; ".join(cmp.instability)
    lines.append(f"late-stage instability ({cand.name}): {flag}" if flag else
                 f"late-stage instability ({cand.name}): none flagged")
    lines.append(f"parity: FAIL: {', '.join(cmp.failed)}: lower bound below -{spec.margin:g}" if cmp.failed else
                 f"parity: PASS: every gated statistic's lower bound at or above -{spec.margin:g}")
    return "\n".join(lines)


# Of upstream's ~27 rollout_corr/* metrics, the table shows the divergence and how many weights were truncated or
# samples rejected; --json keeps them all.
SHOWN_CORR = ("rollout_corr/kl", "rollout_corr/rollout_is_mean", "rollout_corr/rollout_is_ratio_fraction_high",
              "rollout_corr/rollout_rs_masked_fraction")


def _diag_table(base: Arm, cand: Arm, steps: list[int]) -> str:
    diag = {a.name: diagnostics(a, steps) for a in (base, cand)}
    keys = sorted((k for k in set(diag[base.name]) | set(diag[cand.name])
                   if not k.startswith("rollout_corr/") or k in SHOWN_CORR),
                  key=lambda k: (k.startswith("rollout_corr/"), k))
    out = ["off-policy diagnostics per step (arm means; baseline | candidate; --json has every step):",
           "  step  " + "  ".join(f"{k.split('/')[-2] + '/' + k.split('/')[-1]:>27}" for k in keys)]
    every = max(1, math.ceil(len(steps) / 25))  # a long run: every k-th step here, all of them in --json
    for i, s in enumerate(steps):
        if i % every and i != len(steps) - 1:
            continue
        cells = []
        for k in keys:
            b, c = (diag[a][k][i] if k in diag[a] else None for a in (base.name, cand.name))
            cells.append(f"{_short(b):>13}|{_short(c):<13}")
        out.append(f"  {s:4d}  " + "  ".join(cells))
    return "\n".join(out)


def _short(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g}"


def to_json(base: Arm, cand: Arm, cmp: Comparison, spec: Margin) -> dict:
    return {"schema": "verl-ascend/parity/v1", "metric": cmp.metric, "margin": spec.margin, "passed": cmp.passed,
            "failed": cmp.failed, "instability": cmp.instability, "steps": cmp.steps,
            "statistics": {k: vars(v) for k, v in cmp.diffs.items()}, "gated": list(spec.statistics),
            "arms": {a.name: {"label": a.label(), "runs": [r.path for r in a.runs], "seeds": [r.seed for r in a.runs],
                              "modes": [r.mode for r in a.runs], "steps_per_s": steps_per_s(a),
                              "diagnostics": diagnostics(a, cmp.steps)} for a in (base, cand)}}


def _band(ax, x, m: np.ndarray, color: str, label: str) -> None:
    with _quiet():
        mean, lo, hi = np.nanmean(m, 0), np.nanmin(m, 0), np.nanmax(m, 0)
    ax.plot(x, mean, color=color, label=label)
    ax.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)


def plot_arms(arms: list[Arm], spec: Margin, path: Path) -> Path:
    """Each arm's primary metric (mean, band = min..max over runs) by step and by wall-clock, and its diagnostics."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    steps = sorted(set.intersection(*[set(a.steps) for a in arms]))
    t = horizon(*arms)
    grid = np.linspace(0.0, t, 200)
    fig, ax = plt.subplots(2, 2, figsize=(12, 7.5))
    for i, arm in enumerate(arms):
        color = f"C{i}"
        _band(ax[0][0], steps, arm.matrix(arm.metric, steps), color, arm.label())
        _band(ax[0][1], grid, np.array([by_time(r, arm.metric, grid)[1] for r in arm.runs]), color, arm.name)
        for j, key in enumerate((STALENESS, "actor/grad_norm")):
            m = arm.matrix(key, steps)
            if np.isfinite(m).any():
                _band(ax[1][j], steps, m, color, arm.name)
    titles = ((f"{arms[0].metric} by step", f"{arms[0].metric} by wall-clock (s of training)"),
              ("staleness (model versions) by step", "gradient norm by step"))
    for row, names in zip(ax, titles):
        for a, title in zip(row, names):
            a.set_title(title, fontsize=9)
            a.grid(alpha=0.3)
    ax[0][0].legend(fontsize=7)
    for a in (ax[0][0], ax[1][0], ax[1][1]):
        a.set_xlabel("step")
    ax[0][1].set_xlabel("seconds")
    fig.suptitle(f"band: min..max over runs; margin {spec.margin:g}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot(base: Arm, cand: Arm, spec: Margin, path: Path) -> Path:
    return plot_arms([base, cand], spec, path)


# ================================================================================================ CLI
def main(argv: Optional[list[str]] = None) -> int:
    ap = parser("parity", "Compare two arms of runs (>= 3 each): the primary metric's final, max and area, "
                "candidate - baseline with a bootstrap interval, against a non-inferiority margin; off-policy "
                "diagnostics per step; a plot by step and by wall-clock.",
                ["verl-ascend parity --baseline runs/sync/* --candidate runs/async/* "
                 "--margin recipe/dapo_ascend/margins/parity_async.yaml --json parity.json"])
    ap.add_argument("--baseline", nargs="+", required=True, metavar="RUN", help="metrics .jsonl files or run folders")
    ap.add_argument("--candidate", nargs="+", required=True, metavar="RUN", help="metrics .jsonl files or run folders")
    ap.add_argument("--margin", required=True, help="margin YAML (schema verl-ascend/parity-margin/v1)")
    ap.add_argument("--names", nargs=2, default=("baseline", "candidate"), metavar=("BASE", "CAND"))
    ap.add_argument("--plot", type=Path, default=Path("parity.png"), help="PNG to write (default parity.png)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison as JSON here")
    args = ap.parse_args(argv)
    try:
        spec = load_margin(args.margin)
        base = load_arm(args.names[0], args.baseline, spec)
        cand = load_arm(args.names[1], args.candidate, spec)
        cmp = compare(base, cand, spec)
    except ParityInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return REFUSED
    print(render(base, cand, cmp, spec))
    try:
        if args.json:
            args.json.write_text(json.dumps(to_json(base, cand, cmp, spec), indent=1) + "\n")
            print(f"json: {args.json}")
        if not args.no_plot:
            print(f"plot: {plot(base, cand, spec, args.plot)}")
    except OSError as e:
        print(f"error: cannot write {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return FAILED
    return OK if cmp.passed else REFUSED
