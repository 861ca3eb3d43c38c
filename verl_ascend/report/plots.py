"""Plots of the report: the rollout timeline per lane (with the tail shaded), the per-step
breakdown of phase times, and the regression gate's comparison with its baseline. Agg backend: no
display needed; each file is written to a temporary name and renamed, so a failed run never leaves
half a PNG.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

from verl_ascend.report import intervals
from verl_ascend.report.lanes import LaneStats

_COLORS = {
    "gen": "#d62728", "reward": "#bcbd22", "old_log_prob": "#1f77b4", "ref": "#808000", "values": "#17becf",
    "adv": "#8c564b", "update_critic": "#e377c2", "update_actor": "#ff7f0e", "update_weights": "#9467bd",
    "save_checkpoint": "#2ca02c", "testing": "#7f7f7f", "other": "#c7c7c7", "rollout_s": "#d62728",
    "train_s": "#ff7f0e", "rollout": "#d62728", "train": "#ff7f0e",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def rollout_timeline(rounds: list[list[LaneStats]], tails: list[dict], path: Path, max_rounds: int = 4) -> bool:
    """One panel per rollout round: a row per lane coloured by busy fraction over time, the lane's end
    marked, and the tail (fewer than half of the lanes still generating) shaded."""
    if not rounds:
        return False
    plt = _pyplot()
    shown = list(zip(rounds, tails))[:max_rounds]
    height = sum(max(1.2, 0.35 * len(r) + 0.9) for r, _ in shown)
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, height + 0.5), squeeze=False)
    cmap = plt.get_cmap("Blues")
    for ax, (lanes, tail) in zip(axes[:, 0], shown):
        lanes = sorted(lanes, key=lambda l: l.label)
        t0 = tail["t0_us"]
        wall = tail["wall_s"] or 0.0
        for row, lane in enumerate(lanes):
            edges, frac = intervals.occupancy(lane.curve_grid, lane.curve_cum, 400)
            if len(edges):
                x = (edges - t0) / 1e6
                ax.broken_barh([(x[i], x[i + 1] - x[i]) for i in range(len(frac))], (row - 0.4, 0.8),
                               facecolors=[cmap(0.25 + 0.75 * f) for f in frac], linewidth=0)
            ax.plot([(lane.last_us - t0) / 1e6] * 2, [row - 0.45, row + 0.45], color="black", linewidth=1.2)
        ts = tail["tail_start_s"]
        if tail["tail_s"]:
            ax.axvspan(ts, wall, color="#d62728", alpha=0.15, lw=0)
            ax.axvline(ts, color="#d62728", linewidth=1, linestyle="--")
        frac_txt = f"tail {tail['tail_fraction']:.0%}" if tail["tail_fraction"] is not None else "tail n/a"
        strag = tail["straggler_fraction"]
        title = (f"rollout round{'' if tail['step'] is None else ' (step %s)' % tail['step']}: {len(lanes)} lanes, "
                 f"wall {wall:.3g} s, {frac_txt}" + (f", stragglers {strag:.0%}" if strag is not None else ""))
        ax.set_title(title, fontsize=10)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels([l.label for l in lanes], fontsize=8)
        ax.set_xlim(0, max(wall, 1e-9) * 1.02)
        ax.set_ylim(-0.6, len(lanes) - 0.4)
        ax.set_xlabel("seconds since the first lane started (darker = busier; bar = lane finished; red = tail)",
                      fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def step_breakdown(phases: dict, path: Path) -> bool:
    """Stacked bar per step: each phase's seconds (metrics log), or rollout vs training (traces)."""
    rows = phases.get("per_step") or []
    if not rows:
        return False
    plt = _pyplot()
    total_key = phases.get("total_phase", "step")
    names = [p for p in phases.get("phases", []) if p != total_key]
    steps = [str(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows) + 3), 4.5))
    bottom = np.zeros(len(rows))
    for name in names:
        vals = np.array([(r.get("phases_s") or {}).get(name) or 0.0 for r in rows], dtype=float)
        if not vals.any():
            continue
        ax.bar(steps, vals, bottom=bottom, label=name, color=_COLORS.get(name))
        bottom += vals
    totals = np.array([(r.get("phases_s") or {}).get(total_key) or 0.0 for r in rows], dtype=float)
    other = np.clip(totals - bottom, 0.0, None)
    if (other > 1e-9).any():
        ax.bar(steps, other, bottom=bottom, label="other (rest of the step)", color=_COLORS["other"])
    ratio = phases.get("rollout_per_train")
    ax.set_title("time per step by phase" + (f" (train : rollout = 1 : {ratio:.2f})" if ratio else ""), fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def gate_comparison(rows: list, values: dict[int, dict[str, float]], window: tuple[int, int], path: Path) -> Path:
    """A panel per metric: the run's value at each step, the window shaded, the baseline and the band
    of values that pass (to the unbounded side for a one-sided metric), the window's reduced value.
    ``rows`` are the regression gate's (``verl_ascend.report.gate.Row``)."""
    plt = _pyplot()
    first, last = window
    cols = 2 if len(rows) > 1 else 1
    nrows = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 2.8 * nrows), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.set_visible(False)
    for ax, row in zip(axes.flat, rows):
        steps = [s for s in values if row.spec.name in values[s]]
        ax.plot(steps, [values[s][row.spec.name] for s in steps], "-o", markersize=3, color="C0", label="run")
        ax.axvspan(first - 0.5, last + 0.5, color="#999999", alpha=0.12, lw=0, label=f"window {first}-{last}")
        ax.axhline(row.spec.value, color="black", linewidth=1, label="baseline")
        low, high = row.spec.allowed()
        y0, y1 = ax.get_ylim()
        shown = [y0, y1] + [e for e in (low, high) if math.isfinite(e)]
        pad = 0.05 * (max(shown) - min(shown) or 1.0)
        bottom, top = min(shown) - pad, max(shown) + pad
        for edge in (low, high):
            if math.isfinite(edge):
                ax.axhline(edge, color="C2", linewidth=1, linestyle="--")
        ax.axhspan(max(low, bottom), min(high, top), color="C2", alpha=0.12, lw=0,
                   label=f"passes ({row.spec.tolerance_text()})")
        if row.run is not None and math.isfinite(row.run):
            color = "C3" if row.verdict.upper().startswith("REGRESSED") else "C1"
            ax.hlines(row.run, first - 0.5, last + 0.5, color=color, linewidth=2, label=f"run {row.spec.reduce}")
        ax.set_ylim(bottom, top)
        ax.set_title(f"{row.spec.name}: {row.verdict}", fontsize=9,
                     color="C3" if row.verdict == "REGRESSED" else "black")
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


_LANE_COLORS = {"train": "#ff7f0e", "rollout": "#d62728", "weight sync": "#9467bd"}


def async_timeline(view, path: Path, max_windows: int = 3) -> bool:
    """Asynchronous modes: one row per pool/role on one time axis (a panel per profiled window, or the
    whole run from the metrics), spans of activity as bars; hatched = possibly busy, not logged."""
    if not view.lanes or not view.windows:
        return False
    plt = _pyplot()
    d = view.data
    shown = list(zip(view.windows, d.get("windows", [])))[:max_windows]
    lanes = view.lanes
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, (0.45 * len(lanes) + 1.3) * len(shown) + 0.4), squeeze=False)
    for ax, ((lo, hi), numbers) in zip(axes[:, 0], shown):
        for row, lane in enumerate(lanes):
            y = len(lanes) - 1 - row
            color = _LANE_COLORS.get(lane.role, "#7f7f7f")
            for blocks, kw in ((lane.maybe, dict(facecolors="none", edgecolors=color, hatch="///", linewidth=0.5)),
                               (lane.spans, dict(facecolors=color, linewidth=0))):
                clipped = intervals.clip(blocks, lo, hi)
                if len(clipped.starts):
                    ax.broken_barh([((a - lo) / 1e6, (b - a) / 1e6) for a, b in zip(clipped.starts, clipped.ends)],
                                   (y - 0.35, 0.7), **kw)
        if d.get("basis") == "metrics":
            edges = np.cumsum([0.0] + [r["step_s"] for r in d.get("per_step", [])])
            for x, r in zip(edges, d.get("per_step", [])):
                ax.axvline(x, color="#bbbbbb", linewidth=0.6, zorder=0)
                ax.text(x, len(lanes) - 0.45, f" {r['step']}", fontsize=6, color="#777777", va="bottom")
        ov = numbers.get("overlap_fraction")
        idle = ", ".join(f"{k} pool idle {100 * (v['idle_fraction'] or 0):.0f}%" for k, v in numbers["pools"].items())
        title = (f"{d['mode']}, {'profiled window' if d.get('basis') == 'traces' else 'all steps, from metrics'}: "
                 f"{numbers['wall_s']:.2f} s, overlap " + ("n/a" if ov is None else f"{100 * ov:.0f}%")
                 + (f" (at most {100 * numbers['overlap_max_fraction']:.0f}%)" if "overlap_max_fraction" in numbers else "")
                 + f"; {idle}")
        ax.set_title(title, fontsize=9)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels([l.label for l in reversed(lanes)], fontsize=8)
        ax.set_xlim(0, max(hi - lo, 1e-9) / 1e6 * 1.01)
        ax.set_ylim(-0.6, len(lanes) - 0.3)
        ax.set_xlabel("seconds since the window started (bars: busy; hatched: possibly busy, not logged"
                      + ("; grey lines: step starts" if d.get("basis") == "metrics" else "") + ")", fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True
