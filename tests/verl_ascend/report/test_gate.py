"""The regression gate on a real metrics file of the demo (tests/recipe/fixtures) and doctored copies
of it: the verdict per metric and the exit status (0 pass, 1 regression, 2 input that cannot be
compared, each culprit named), one-sidedness, the plot and the JSON written."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.report.gate import SCHEMA, load_baseline, main

DEMO_METRICS = REPO / "tests" / "recipe" / "fixtures" / "dapo_demo_cpu_metrics.jsonl"
PNG = b"\x89PNG\r\n\x1a\n"
SCORE, STEP_TIME, DIFF = "critic/score/mean", "timing_s/step", "training/rollout_probs_diff_max"


def window_mean(key, first=2, last=11, path=DEMO_METRICS):
    values = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if first <= rec["step"] <= last and key in rec["data"]:
            values[rec["step"]] = rec["data"][key]
    return sum(values.values()) / len(values)


def write_baseline(path, metrics=None, **top):
    """A baseline whose values are the fixture's own window means (so the real run passes)."""
    metrics = metrics if metrics is not None else {
        SCORE: {"group": "correctness", "value": round(window_mean(SCORE), 4), "regression": "drop", "abs": 0.05},
        STEP_TIME: {"group": "speed", "value": round(window_mean(STEP_TIME), 3), "regression": "rise", "rel": 0.05},
        DIFF: {"group": "correctness", "value": 0.0, "regression": "rise", "reduce": "max", "abs": 1e-4,
               "optional": True},
    }
    gated = sorted({m["group"] for m in metrics.values()})
    data = {"schema": SCHEMA, "window": {"first": 2, "last": 11}, "gated": gated, "metrics": metrics, **top}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def doctor(src, dst, key, change, steps=range(2, 12)):
    """Copy of a metrics file with ``change(value)`` applied to ``key`` on ``steps`` (added when absent)."""
    out = []
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        if rec["step"] in steps:
            rec["data"][key] = change(rec["data"].get(key))
        out.append(json.dumps(rec))
    dst.write_text("\n".join(out) + "\n")
    return dst


def gate(capsys, metrics, baseline, *extra):
    rc = main([str(metrics), "--baseline", str(baseline), *map(str, extra)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def verdicts(out):
    """metric -> verdict column of the printed table (the lines between the rule and the blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("------"))
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        rows[cells[0]] = cells[-1]
    return rows


def test_real_demo_run_passes_and_the_plot_is_written(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_bytes(DEMO_METRICS.read_bytes())
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml"), "--json", tmp_path / "gate.json")
    assert rc == OK, out
    assert verdicts(out) == {SCORE: "ok", STEP_TIME: "ok", DIFF: "skipped (optional, not logged)"}
    assert "gate: PASS (2 gated metric(s) within tolerance)" in out
    png = tmp_path / "regression_gate.png"
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 20_000
    assert f"plot: {png}" in out
    d = json.loads((tmp_path / "gate.json").read_text())
    row = next(r for r in d["rows"] if r["metric"] == SCORE)
    assert d["passed"] and d["window"] == [2, 11] and row["steps"] == list(range(2, 12))
    assert row["run"] == pytest.approx(window_mean(SCORE))
    assert row["allowed"] == [pytest.approx(row["baseline"] - 0.05), None]  # drop only: no upper bound


@pytest.mark.parametrize(
    "key, change, culprit",
    [
        (SCORE, lambda v: v - 0.06, SCORE),  # reward lowered beyond the 0.05 tolerance
        (STEP_TIME, lambda v: v * 1.08, STEP_TIME),  # step time raised 8 % against +5 %
        (DIFF, lambda v: 3e-3, DIFF),  # the rollout's log-probs drift from the actor's
        (SCORE, lambda v: math.nan, SCORE),  # a NaN reward is never within tolerance
    ],
)
def test_doctored_run_fails_naming_the_metric(tmp_path, capsys, key, change, culprit):
    metrics = doctor(DEMO_METRICS, tmp_path / "metrics.jsonl", key, change)
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml"), "--no-plot")
    assert rc == REFUSED, out
    assert verdicts(out)[culprit] == "REGRESSED"
    assert f"gate: FAIL: 1 regressed: {culprit}" in out
    assert not (tmp_path / "regression_gate.png").exists()


def test_a_change_within_tolerance_passes(tmp_path, capsys):
    metrics = doctor(DEMO_METRICS, tmp_path / "metrics.jsonl", SCORE, lambda v: v - 0.04)
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml"), "--no-plot")
    assert rc == OK and verdicts(out)[SCORE] == "ok", out


def test_one_sided_an_improvement_passes(tmp_path, capsys):
    # Reward up by 0.1 and step time halved: both beyond their tolerance, both the good way.
    metrics = doctor(DEMO_METRICS, tmp_path / "m1.jsonl", SCORE, lambda v: v + 0.1)
    metrics = doctor(metrics, tmp_path / "m2.jsonl", STEP_TIME, lambda v: v / 2)
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml"), "--no-plot")
    assert rc == OK, out
    assert verdicts(out)[SCORE] == "improved" and verdicts(out)[STEP_TIME] == "improved"


def test_either_direction_fails_both_ways(tmp_path, capsys):
    value = round(window_mean(SCORE), 4)
    baseline = write_baseline(tmp_path / "b.yaml", {SCORE: {"group": "correctness", "value": value,
                                                            "regression": "either", "abs": 0.05}})
    for sign in (+1, -1):
        metrics = doctor(DEMO_METRICS, tmp_path / "m.jsonl", SCORE, lambda v: v + sign * 0.06)
        rc, out, _ = gate(capsys, metrics, baseline, "--no-plot")
        assert rc == REFUSED and "±0.05" in out and verdicts(out)[SCORE] == "REGRESSED", out


def test_ungated_group_is_reported_not_failed(tmp_path, capsys):
    metrics = doctor(DEMO_METRICS, tmp_path / "metrics.jsonl", STEP_TIME, lambda v: v * 1.5)
    baseline = write_baseline(tmp_path / "b.yaml")
    rc, out, _ = gate(capsys, metrics, baseline, "--no-plot", "--gate", "correctness")
    assert rc == OK and verdicts(out)[STEP_TIME] == "regressed (not gated)", out
    rc, out, _ = gate(capsys, metrics, baseline, "--no-plot")  # the baseline's own list gates speed
    assert rc == REFUSED and "+50.0%" in out, out


def test_relative_tolerance_is_a_fraction_of_the_baseline(tmp_path, capsys):
    value = window_mean(STEP_TIME)
    baseline = write_baseline(tmp_path / "b.yaml", {STEP_TIME: {"group": "speed", "value": value,
                                                                "regression": "rise", "rel": 0.05}})
    for factor, rc_expected in ((1.04, OK), (1.06, REFUSED)):
        metrics = doctor(DEMO_METRICS, tmp_path / "m.jsonl", STEP_TIME, lambda v: v * factor)
        rc, out, _ = gate(capsys, metrics, baseline, "--no-plot")
        assert rc == rc_expected, (factor, out)


def test_reduce_max_takes_the_window_peak(tmp_path, capsys):
    key = "actor/perf/max_memory_allocated_gb"
    metrics = doctor(DEMO_METRICS, tmp_path / "metrics.jsonl", key, lambda v: v + 2.0, steps={7})
    spec = {"group": "speed", "value": 0.74, "regression": "rise", "abs": 1.0}
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml", {key: {**spec, "reduce": "max"}}),
                      "--no-plot")
    assert rc == REFUSED, out  # one step 2 GB over: the peak
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml", {key: spec}), "--no-plot")
    assert rc == OK, out  # the mean of ten steps moves 0.2 GB only
    # A NaN on one step fails the metric even where the reduction (the peak) would pass over it.
    metrics = doctor(DEMO_METRICS, tmp_path / "nan.jsonl", key, lambda v: math.nan, steps={7})
    rc, out, _ = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml", {key: {**spec, "reduce": "max"}}),
                      "--no-plot")
    assert rc == REFUSED and verdicts(out)[key] == "REGRESSED", out


# ================================================================================================ bad input
def bad(capsys, metrics, baseline, *extra):
    rc, out, err = gate(capsys, metrics, baseline, *extra)
    assert rc == REFUSED and not out, (out, err)
    return err


def test_missing_files_are_named(tmp_path, capsys):
    baseline = write_baseline(tmp_path / "b.yaml")
    assert f"metrics file {tmp_path / 'nope.jsonl'} not found" in bad(capsys, tmp_path / "nope.jsonl", baseline)
    assert f"baseline {tmp_path / 'nope.yaml'} not found" in bad(capsys, DEMO_METRICS, tmp_path / "nope.yaml")
    assert not (tmp_path / "regression_gate.png").exists()


def test_a_json_it_cannot_write_is_the_command_failing_not_a_verdict(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    rc, out, err = gate(capsys, DEMO_METRICS, write_baseline(tmp_path / "b.yaml"), "--no-plot",
                        "--json", blocker / "gate.json")
    # The checks' one table: 1 is "the tool broke" (no verdict given), 2 would read as a regression.
    assert rc == FAILED == 1 and not out, (out, err)
    assert f"error: cannot write {blocker}: File exists" in err and blocker.read_text() == "keep me"


@pytest.mark.parametrize(
    "edit, culprit",
    [
        (lambda b: b.update(windw={"first": 2, "last": 11}), "windw: unknown key(s)"),
        (lambda b: b["metrics"][SCORE].update(tolerance=0.05), f"metrics.{SCORE}: unknown key(s) tolerance"),
        (lambda b: b["metrics"][SCORE].update(regression="down"), f"metrics.{SCORE}.regression is 'down'"),
        (lambda b: b["metrics"][SCORE].pop("abs"), f"metrics.{SCORE}: give exactly one tolerance"),
        (lambda b: b["metrics"][SCORE].update(rel=0.1), f"metrics.{SCORE}: give exactly one tolerance"),
        (lambda b: b["metrics"][SCORE].update(abs="5%"), f"metrics.{SCORE}.abs is '5%'; accepted: a finite number"),
        (lambda b: b["metrics"][SCORE].update(reduce="median"), f"metrics.{SCORE}.reduce is 'median'"),
        (lambda b: b["metrics"][SCORE].pop("group"), f"metrics.{SCORE}: 'group' is missing"),
        (lambda b: b.update(window={"first": 11, "last": 2}), "window is {'first': 11, 'last': 2}"),
        (lambda b: b.update(gated=["corectness"]), "gated: group(s) corectness have no metric"),
        (lambda b: b.update(schema="v0"), f"schema is 'v0'; accepted: {SCHEMA}"),
    ],
)
def test_bad_baseline_key_is_named(tmp_path, capsys, edit, culprit):
    path = write_baseline(tmp_path / "b.yaml")
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    err = bad(capsys, DEMO_METRICS, path)
    assert f"{path}: {culprit}" in err, err


def test_window_without_the_runs_steps_is_named(tmp_path, capsys):
    baseline = write_baseline(tmp_path / "b.yaml", window={"first": 20, "last": 29})
    err = bad(capsys, DEMO_METRICS, baseline)
    assert "window (steps 20-29" in err and "needs step(s) 20-29" in err and "it has steps 1-11" in err, err
    # A run that stopped early cannot pass either: the missing steps are named.
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(DEMO_METRICS.read_text().splitlines()[:8]) + "\n")
    err = bad(capsys, short, write_baseline(tmp_path / "b2.yaml"))
    assert "needs step(s) 9-11" in err and "it has steps 1-8" in err, err


def test_required_metric_missing_from_the_run_is_named(tmp_path, capsys):
    spec = {"group": "correctness", "value": 0.8, "regression": "drop", "abs": 0.05}
    baseline = write_baseline(tmp_path / "b.yaml", {"critic/rewards/meen": spec})
    err = bad(capsys, DEMO_METRICS, baseline)
    assert "metric 'critic/rewards/meen' of the baseline is not logged in steps 2-11" in err
    assert "close names in the run: critic/rewards/mean" in err, err
    # The same metric marked optional is skipped.
    baseline = write_baseline(tmp_path / "b.yaml", {"critic/rewards/meen": {**spec, "optional": True}})
    rc, out, _ = gate(capsys, DEMO_METRICS, baseline, "--no-plot")
    assert rc == OK and verdicts(out)["critic/rewards/meen"] == "skipped (optional, not logged)"


def test_damaged_metrics_line_is_named(tmp_path, capsys):
    lines = DEMO_METRICS.read_text().splitlines()
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(lines[:5] + ['{"step": 6, "data": {"critic/sc'] + lines[6:]) + "\n")
    err = bad(capsys, metrics, write_baseline(tmp_path / "b.yaml"))
    assert f"{metrics}:6: not JSON" in err, err


def test_unknown_gate_group_on_the_command_line(tmp_path, capsys):
    baseline = write_baseline(tmp_path / "b.yaml")
    err = bad(capsys, DEMO_METRICS, baseline, "--gate", "sped")
    assert "--gate: group(s) sped have no metric; groups of its metrics: correctness, speed" in err, err


def test_baseline_loader_keeps_the_values(tmp_path):
    b = load_baseline(write_baseline(tmp_path / "b.yaml"))
    assert b.window == (2, 11) and b.gated == ("correctness", "speed")
    spec = {m.name: m for m in b.metrics}[STEP_TIME]
    assert spec.relative and spec.allowed() == (-math.inf, pytest.approx(spec.value * 1.05))


def test_the_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verl_ascend", "gate", str(DEMO_METRICS), "--baseline",
                           str(write_baseline(tmp_path / "b.yaml")), "--plot", str(tmp_path / "p.png")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == OK, proc.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG


def test_the_documented_baselines_load(tmp_path):
    """docs/ascend_tutorial/regression_gate.md: the schema example and check_npu's gate as a baseline."""
    text = (REPO / "docs" / "ascend_tutorial" / "regression_gate.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    assert len(blocks) == 2
    loaded = []
    for i, block in enumerate(blocks):
        path = tmp_path / f"doc{i}.yaml"
        path.write_text(block)
        loaded.append(load_baseline(path))
    assert loaded[0].window == (2, 11) and loaded[0].gated == ("correctness",)
    npu = {m.name: m for m in loaded[1].metrics}
    assert loaded[1].window == (5, 14)
    assert npu["actor/perf/max_memory_allocated_gb"].allowed()[1] == pytest.approx(53.3)
    assert npu["training/rollout_probs_diff_mean"].regression == "either" and npu["perf/throughput"].relative


def _torn(tmp_path, step, cut=40):
    """The real demo run's metrics with a record of ``step`` cut off after ``cut`` bytes, as a crash leaves it."""
    lines = DEMO_METRICS.read_text().splitlines()
    record = json.loads(lines[-1])
    record["step"] = step
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(lines) + "\n" + json.dumps(record)[:cut])
    return metrics


def test_a_torn_last_line_after_the_window_is_dropped_with_a_note(tmp_path, capsys):
    metrics = _torn(tmp_path, 12)  # the window is 2-11
    rc, out, err = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml"), "--no-plot")
    assert rc == OK, err
    assert out.startswith(f"note: {metrics}:12: dropped the last line, cut off while writing step 12 "
                          "(outside the window, steps 2-11)")
    assert verdicts(out)[SCORE] == "ok" and verdicts(out)[STEP_TIME].startswith("ok")


@pytest.mark.parametrize("step, cut", [(11, 40), (12, 8)])  # inside the window; cut before its step was written
def test_a_torn_last_line_that_may_hold_window_data_still_refuses(tmp_path, capsys, step, cut):
    metrics = _torn(tmp_path, step, cut)
    rc, out, err = gate(capsys, metrics, write_baseline(tmp_path / "b.yaml"), "--no-plot")
    assert rc == REFUSED and out == ""
    assert f"{metrics}:12: last line is incomplete: the log was cut off" in err
