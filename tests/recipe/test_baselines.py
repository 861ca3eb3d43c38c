"""The shipped regression baselines (recipe/dapo_ascend/baselines): each window fits the run it is
for, each passes on a real run of it (tests/recipe/fixtures, captured on this project's CI machine
kind) and fails on a doctored copy, naming the metric."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ascend.checks.exits import OK as EXIT_OK, REFUSED as EXIT_REGRESSED  # the gate: a regression is REFUSED
from verl_ascend.report.gate import load_baseline

REPO = Path(__file__).resolve().parents[2]
BASELINES = REPO / "recipe" / "dapo_ascend" / "baselines"
FIXTURES = Path(__file__).parent / "fixtures"
CONFIG_DIR = str(REPO / "recipe" / "dapo_ascend" / "config")
# baseline -> (the run's config and overrides, a real metrics file of that run)
RUNS = {
    "dapo_demo_cpu.yaml": ("dapo_demo_cpu", [], "dapo_demo_cpu_metrics.jsonl"),
    "dapo_demo_cpu_2steps.yaml": ("dapo_demo_cpu", ["trainer.total_training_steps=2"],
                                  "dapo_demo_cpu_2steps_metrics.jsonl"),
}
# An honest demo run whose responses ran long for three steps (overlong penalty 0.95 at step 7):
# its score's window mean is 0.585, its accuracies are those of a run that learnt.
LONG_RESPONSES = "dapo_demo_cpu_metrics_long_responses.jsonl"
# tests/cpu/test_vllm_e2e.py's run: the 2-step command with actor_rollout_ref.rollout.name=vllm.
VLLM_2STEPS = "dapo_demo_cpu_2steps_vllm_metrics.jsonl"


def gate(metrics, baseline, *extra):
    return subprocess.run([sys.executable, "-m", "verl_ascend", "gate", str(metrics), "--baseline",
                           str(BASELINES / baseline), "--no-plot", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def doctor(src: Path, dst: Path, key: str, change) -> Path:
    lines = []
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        rec["data"][key] = change(rec["data"].get(key))
        lines.append(json.dumps(rec))
    dst.write_text("\n".join(lines) + "\n")
    return dst


def verdict(out: str, metric: str) -> str:
    row = next(line for line in out.splitlines() if line.startswith(metric + " "))
    return [c.strip() for c in row.split("  ") if c.strip()][-1]


def test_every_shipped_baseline_has_a_run():
    assert sorted(p.name for p in BASELINES.glob("*.yaml")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_window_fits_the_runs_steps_and_ci_gates_correctness_only(name):
    from hydra import compose, initialize_config_dir

    config, overrides, _ = RUNS[name]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name=config, overrides=["tiny_dir=/t", *overrides])
    baseline = load_baseline(BASELINES / name)
    first, last = baseline.window
    assert 1 <= first <= last <= cfg.trainer.total_training_steps
    assert baseline.gated == ("correctness",)
    groups = {m.name: m.group for m in baseline.metrics}
    assert {"perf/throughput", "timing_s/step", "actor/perf/max_memory_allocated_gb"} <= set(groups)
    assert {groups[k] for k in ("perf/throughput", "timing_s/step", "actor/perf/max_memory_allocated_gb")} == {"speed"}
    assert groups["critic/score/mean"] == groups["training/rollout_probs_diff_max"] == "correctness"


@pytest.mark.parametrize("name, fixture", [(n, r[2]) for n, r in sorted(RUNS.items())]
                         + [("dapo_demo_cpu.yaml", LONG_RESPONSES), ("dapo_demo_cpu_2steps.yaml", VLLM_2STEPS)])
def test_real_run_passes(name, fixture):
    proc = gate(FIXTURES / fixture, name)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "gate: PASS" in proc.stdout
    for metric in ("critic/score/mean", "reward_extra/acc/sampled_mean"):
        assert verdict(proc.stdout, metric) == "ok"


@pytest.mark.parametrize("name", sorted(RUNS))
@pytest.mark.parametrize("key, change", [
    ("critic/score/mean", lambda v: v - 0.4),  # reward lowered beyond either baseline's tolerance
    ("training/rollout_probs_diff_max", lambda v: 2e-3),  # rollout log-probs off the actor's (bf16-like)
])
def test_doctored_correctness_fails_naming_the_metric(tmp_path, name, key, change):
    metrics = doctor(FIXTURES / RUNS[name][2], tmp_path / "metrics.jsonl", key, change)
    proc = gate(metrics, name)
    assert proc.returncode == EXIT_REGRESSED, proc.stdout + proc.stderr
    assert verdict(proc.stdout, key) == "REGRESSED" and f"gate: FAIL: 1 regressed: {key}" in proc.stdout


@pytest.mark.parametrize("name", sorted(RUNS))
def test_slower_run_is_reported_and_fails_only_when_speed_is_gated(tmp_path, name):
    metrics = doctor(FIXTURES / RUNS[name][2], tmp_path / "metrics.jsonl", "timing_s/step", lambda v: v * 1.3)
    proc = gate(metrics, name)
    assert proc.returncode == EXIT_OK and verdict(proc.stdout, "timing_s/step") == "regressed (not gated)"
    proc = gate(metrics, name, "--gate", "speed")
    assert proc.returncode == EXIT_REGRESSED and verdict(proc.stdout, "timing_s/step") == "REGRESSED"


def test_a_run_of_the_demo_without_the_recompute_cannot_pass_the_ci_baseline():
    """The demo takes the rollout's log-probs as the old policy's (bypass_mode): no comparison is
    logged, and the CI baseline requires it: input that cannot be compared, named."""
    proc = gate(FIXTURES / RUNS["dapo_demo_cpu.yaml"][2], "dapo_demo_cpu_2steps.yaml")
    assert proc.returncode == 2 and "metric 'training/rollout_probs_diff_max' of the baseline is not logged" in proc.stderr


def test_a_real_weaker_run_fails_on_its_accuracies():
    """make demo with actor_rollout_ref.actor.optim.lr=0.015 (a tenth of the demo's): it still
    learns, slower; the gate names both accuracies (its score, 0.776, is within the wide band)."""
    proc = gate(FIXTURES / "dapo_demo_cpu_metrics_lr0015.jsonl", "dapo_demo_cpu.yaml")
    assert proc.returncode == EXIT_REGRESSED, proc.stdout + proc.stderr
    assert "gate: FAIL: 2 regressed: reward_extra/acc/sampled_mean, reward_extra/acc/mean" in proc.stdout
    assert verdict(proc.stdout, "critic/score/mean") == "ok"
