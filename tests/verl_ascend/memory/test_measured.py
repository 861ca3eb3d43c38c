"""Planned against measured: upstream's perf/max_memory_*_gb metrics of a run next to the plan of its
config, in the report (real files: the run's composed config as .hydra/config.yaml, a metrics.jsonl)."""

from __future__ import annotations

import json

from omegaconf import OmegaConf

from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend.memory import measured
from verl_ascend.memory.plan import plan
from verl_ascend.memory.terms import GIB


def test_trainer_peaks_leave_out_the_engine_and_collective_buffers():
    p = plan(RECIPE.compose("dapo_qwen25_32b_npu", []), {})
    peaks = measured.trainer_peaks(p)
    update = next(x for x in p.phases if x.name == "actor update")
    engine = sum(t.bytes for t in update.resident if "engine" in t.name or "HCCL" in t.name)
    assert engine > 0 and peaks["actor update"] == update.peak - engine
    result = measured.compare(p, {1: {measured.ALLOCATED: 10.0}, 2: {measured.ALLOCATED: 12.5,
                                                                      measured.RESERVED: 14.0}})
    assert result["measured_gib"] == {measured.ALLOCATED: 12.5, measured.RESERVED: 14.0}
    top = result["planned_peak_phase"]
    assert result["allocated_vs_planned"] == round(12.5 * GIB / peaks[top] - 1, 4)


def test_the_report_shows_planned_against_measured(tmp_path):
    from verl_ascend.report.report import build_report, render_text

    config = RECIPE.compose("dapo_qwen25_32b_npu", [])
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(config, resolve=True))
    rows = [{"step": s, "data": {"critic/score/mean": 0.1, "timing_s/step": 10.0, f"actor/{measured.ALLOCATED}": 9.0 + s,
                                 f"actor/{measured.RESERVED}": 11.0 + s}} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_report([run / "metrics.jsonl"], run_configs=[run / ".hydra" / "config.yaml"])
    memory = report.data["memory"]
    assert memory["measured_gib"][measured.ALLOCATED] == 11.0 and memory["device"].startswith("Ascend 910B")
    assert "actor update" in memory["planned_gib"]
    text = render_text(report)
    line = next(l for l in text.splitlines() if "memory (Ascend 910B (A2)): planned trainer peak GiB: " in l)
    assert "actor update" in line and "old log-prob" in line, line
    assert "measured allocated" in text


def test_the_gate_shows_planned_against_measured_without_gating_it(tmp_path):
    """``verl-ascend gate --run-config``: the memory line under the table and in the JSON; the verdict is the
    baseline's alone (the shipped demo baseline, real metrics rows)."""
    from pathlib import Path

    from verl_ascend.report.gate import main as gate

    repo = Path(__file__).resolve().parents[3]
    config = RECIPE.compose("dapo_qwen25_32b_npu", [])
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(config, resolve=True))
    baseline = repo / "recipe" / "dapo_ascend" / "baselines" / "dapo_demo_cpu_2steps.yaml"
    metrics = tmp_path / "metrics.jsonl"
    from verl_ascend.report.gate import load_baseline

    at_baseline = {m.name: m.value for m in load_baseline(baseline).metrics}  # every baseline metric on its value
    at_baseline[f"actor/{measured.ALLOCATED}"] = 3.0
    metrics.write_text("".join(json.dumps({"step": s, "data": at_baseline}) + "\n" for s in (1, 2)))
    out = tmp_path / "gate.json"
    code = gate([str(metrics), "--baseline", str(baseline), "--run-config", str(tmp_path / "config.yaml"), "--no-plot",
                 "--json", str(out)])
    assert code == 0  # the plan is shown, never gated
    data = json.loads(out.read_text())
    assert data["memory"]["measured_gib"] == {measured.ALLOCATED: 3.0}
    assert "actor update" in data["memory"]["planned_gib"]
