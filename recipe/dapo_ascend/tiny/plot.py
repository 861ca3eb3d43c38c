"""The demo's closing picture: reward, accuracy and response length per step, from metrics.jsonl.

``make demo`` ends with ``verl-ascend plot METRICS``: it writes
``training.png`` next to the metrics file and prints where it is, with the first and last
ten steps' mean accuracy, so a newcomer sees at once whether the model learnt its task. The
panels also show DAPO at work: the overlong penalty next to the reward, and the groups that
dynamic sampling evicted next to the accuracy.

Two accuracies: over every response sampled in the step (``.../sampled_mean``, the policy's
accuracy) and over the trained batch (``.../mean``), which dynamic sampling has emptied of
all-right groups and so sits below the first by design (recipe/dapo_ascend/trainer.py).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from verl_ascend.checks import exits
from verl_ascend.cli import parser as cli_parser

ACC = "reward_extra/acc/mean"
SAMPLED_ACC = "reward_extra/acc/sampled_mean"
EVICTED = "training/filter_groups/evicted_samples"  # upstream's name; it counts groups
PANELS = (
    # (title, [(metric, label)])
    ("reward", [("critic/score/mean", "score (acc + overlong penalty)"), ("reward_extra/overlong_reward/mean", "overlong penalty")]),
    ("accuracy", [(SAMPLED_ACC, "every sampled response"), (ACC, "trained batch"),
                  (EVICTED, "groups evicted by dynamic sampling")]),
    ("response length (tokens)", [("response_length/mean", "mean"), ("response_length/max", "max")]),
)


def read_steps(metrics: Path) -> list[tuple[int, dict]]:
    """(step, metrics) of every training step, last record of a step winning (resumed runs)."""
    by_step = {}
    for line in metrics.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if "critic/score/mean" in record["data"]:
                by_step[record["step"]] = record["data"]
    return sorted(by_step.items())


def plot(metrics: Path, out: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    steps = read_steps(metrics)
    if not steps:
        raise ValueError(f"{metrics}: no training step records (expected upstream's JSON lines with critic/score/mean)")
    out = out or metrics.with_name("training.png")
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(7, 7.5), sharex=True)
    xs = [s for s, _ in steps]
    for ax, (title, series) in zip(axes, PANELS):
        for i, (key, label) in enumerate(series):
            ys = [d.get(key) for _, d in steps]
            if all(y is None for y in ys):
                continue
            if key == EVICTED:  # upstream logs it only on steps that evicted something
                ys = [0 if y is None else y for y in ys]
            target = ax.twinx() if key == EVICTED else ax
            style = "-o" if i == 0 else "--"
            target.plot(xs, [float("nan") if y is None else y for y in ys], style, markersize=3, label=label,
                        color=f"C{i}")
            if target is not ax:
                target.set_ylabel(label, color=f"C{i}", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("training step")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def accuracy_summary(steps: list[tuple[int, dict]], window: int = 10) -> str:
    """First and last ``window`` steps' mean accuracy, sampled (when logged) and trained batch."""
    parts = []
    for key, label in ((SAMPLED_ACC, "accuracy"), (ACC, "trained-batch accuracy")):
        accs = [d[key] for _, d in steps if key in d]
        if accs:
            n = min(window, len(accs))
            first, last = statistics.fmean(accs[:window]), statistics.fmean(accs[-window:])
            parts.append(f"{label} {first:.2f} (first {n} steps) -> {last:.2f} (last {n} steps)")
    return "; ".join(parts) or "no accuracy metric"


def main(argv=None) -> int:
    description = __doc__.splitlines()[0] + "\nWrites training.png and prints the first and last steps' accuracy."
    parser = cli_parser("plot", description,
                        ["verl-ascend plot metrics.jsonl --out /tmp/run.png"])
    parser.add_argument("metrics", type=Path, help="upstream's metrics JSON lines (trainer.logger file)")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: training.png next to METRICS)")
    args = parser.parse_args(argv)
    if not args.metrics.is_file():
        print(f"[verl-ascend] error: metrics file {args.metrics} not found", file=sys.stderr)
        return exits.REFUSED
    try:
        out = plot(args.metrics, args.out)
    except (ValueError, json.JSONDecodeError, KeyError) as exc:
        print(f"[verl-ascend] error: {exc}", file=sys.stderr)
        return exits.REFUSED
    print(f"[verl-ascend] {accuracy_summary(read_steps(args.metrics))}; plot: {out.resolve()}")
    return exits.OK
