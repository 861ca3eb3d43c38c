"""The demo's closing plot: written next to the metrics from upstream's JSON lines, and bad input refused."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def write_metrics(path, accs, sampled=None):
    with path.open("w") as f:
        for step, acc in enumerate(accs, start=1):
            data = {
                "critic/score/mean": acc - 0.1,
                "reward_extra/acc/mean": acc,
                "reward_extra/overlong_reward/mean": -0.1,
                "training/filter_groups/evicted_samples": 8 * (step % 3),
                "response_length/mean": 8.0 / step,
                "response_length/max": 8.0,
            }
            if sampled is not None:
                data["reward_extra/acc/sampled_mean"] = sampled[step - 1]
            f.write(json.dumps({"step": step, "data": data}) + "\n")
        # A record that is not a training step (e.g. validation) is not plotted.
        f.write(json.dumps({"step": len(accs), "data": {"val-core/acc": 1.0}}) + "\n")


def plot(*args):
    return subprocess.run([sys.executable, "-m", "verl_ascend", "plot", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_png_next_to_the_metrics_with_first_and_last_accuracy(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, [0.1] * 10 + [0.5] * 5 + [0.9] * 10)
    result = plot(metrics)
    assert result.returncode == 0, result.stderr
    png = tmp_path / "training.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "accuracy 0.10 (first 10 steps) -> 0.90 (last 10 steps)" in result.stdout
    assert f"plot: {png.resolve()}" in result.stdout


def test_sampled_and_trained_batch_accuracy_both_reported(tmp_path):
    # Dynamic sampling drops all-right groups, so the trained batch's accuracy sits below the
    # accuracy of everything sampled; the summary gives both, the sampled one first.
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, [0.5] * 10 + [0.75] * 10, sampled=[0.6] * 10 + [0.95] * 10)
    result = plot(metrics)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "[verl-ascend] accuracy 0.60 (first 10 steps) -> 0.95 (last 10 steps); "
        "trained-batch accuracy 0.50 (first 10 steps) -> 0.75 (last 10 steps); plot: "
    ), result.stdout


def test_bad_input_names_the_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    result = plot(missing)
    assert result.returncode == 2 and f"metrics file {missing} not found" in result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"step": 1, "data": {"val-core/acc": 1.0}}) + "\n")
    result = plot(empty)
    assert result.returncode == 2 and f"{empty}: no training step records" in result.stderr
    assert not (tmp_path / "training.png").exists()
