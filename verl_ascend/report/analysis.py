"""The article's numbers, computed from lanes and metrics logs.

* time per phase and the train:rollout ratio -- from upstream's metrics log when there is one (every
  step is timed there), else from the traces (rollout wall time per round; training stage
  annotations per step);
* rollout tail -- the share of rollout wall time during which fewer than half of the lanes
  (replicas or ranks) are still generating, plus the straggler share (first to last finish) and the
  free time inside the tail;
* host-bound free time -- wall time inside a lane's window with nothing running on the device (or,
  for CPU traces, no operator running on any thread);
* communication not overlapped with computation;
* top kernels / ops.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

from verl_ascend.report.lanes import LaneStats
from verl_ascend.report.metrics_log import GEN_SPREAD_KEYS, MetricsLog
from verl_ascend.report.settings import Settings


def _r(x: Optional[float], nd: int = 9) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


# ================================================================================================ phases
def phases_from_metrics(logs: list[MetricsLog], settings: Settings) -> Optional[dict]:
    steps = {}
    for log in logs:
        for rec in log.steps:
            steps.setdefault(rec.step, rec)
    if not steps:
        return None
    records = [steps[s] for s in sorted(steps)]
    names = [p for p in settings.phase_order if any(p in r.timing for r in records)]
    names += sorted({k for r in records for k in r.timing} - set(names) - {settings.total_phase})
    per_step = []
    for r in records:
        row = {"step": r.step, "phases_s": {k: _r(v) for k, v in r.timing.items()}}
        train = sum(r.timing.get(p, 0.0) for p in settings.train_phases)
        rollout = sum(r.timing.get(p, 0.0) for p in settings.rollout_phases)
        row["train_s"] = _r(train)
        row["rollout_s"] = _r(rollout)
        row["rollout_per_train"] = _r(rollout / train) if train > 0 else None
        per_step.append(row)
    mean = {}
    for p in names + [settings.total_phase]:
        vals = [r.timing[p] for r in records if p in r.timing]
        if vals:
            mean[p] = sum(vals) / len(vals)
    train_s = sum(mean.get(p, 0.0) for p in settings.train_phases)
    rollout_s = sum(mean.get(p, 0.0) for p in settings.rollout_phases)
    step_s = mean.get(settings.total_phase)
    spread = []
    for r in records:
        mx, mn = (r.extra.get(k) for k in GEN_SPREAD_KEYS)
        if mx and mn is not None and mx > 0:
            spread.append((mx - mn) / mx)
    return {
        "source": "metrics",
        "files": [log.path for log in logs],
        "steps": [r.step for r in records],
        "phases": names,
        "total_phase": settings.total_phase,
        "per_step": per_step,
        "mean_s": {k: _r(v) for k, v in mean.items()},
        "share_of_step": {k: _r(v / step_s) for k, v in mean.items() if step_s} if step_s else {},
        "train_s": _r(train_s),
        "rollout_s": _r(rollout_s),
        "train_phases": [p for p in settings.train_phases if p in mean],
        "rollout_phases": [p for p in settings.rollout_phases if p in mean],
        "rollout_per_train": _r(rollout_s / train_s) if train_s > 0 else None,
        "straggler_proxy": _r(sum(spread) / len(spread)) if spread else None,
    }


def phases_from_traces(rounds: list[list[LaneStats]], train: list[LaneStats]) -> Optional[dict]:
    rollout_walls = [(_round_step(r), (max(l.last_us for l in r) - min(l.first_us for l in r)) / 1e6) for r in rounds]
    by_step: dict = defaultdict(list)
    for lane in train:
        if lane.has_activity or lane.stages:
            by_step[lane.step].append(lane)
    train_steps = []
    for step, lanes in sorted(by_step.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        # A rank's training time is the sum of its stage annotations (each discrete trace holds one
        # stage); without annotations, its active window. The step takes as long as its slowest rank.
        per_rank: dict = defaultdict(float)
        for lane in lanes:
            key = lane.rank if lane.rank is not None else lane.label
            per_rank[key] += sum(lane.stages.values()) if lane.stages else lane.window_us
        train_steps.append((step, max(per_rank.values()) / 1e6))
    if not rollout_walls and not train_steps:
        return None
    rollout_s = sum(w for _, w in rollout_walls) / len(rollout_walls) if rollout_walls else None
    train_s = sum(w for _, w in train_steps) / len(train_steps) if train_steps else None
    per_step = defaultdict(dict)
    for step, w in rollout_walls:
        per_step[step]["rollout_s"] = _r(w)
        per_step[step].setdefault("phases_s", {})["rollout"] = _r(w)
    for step, w in train_steps:
        per_step[step]["train_s"] = _r(w)
        per_step[step].setdefault("phases_s", {})["train"] = _r(w)
    return {
        "source": "traces",
        "steps": [s for s in per_step],
        "per_step": [{"step": s, **v} for s, v in per_step.items()],
        "phases": ["rollout", "train"],
        "total_phase": None,
        "mean_s": {k: v for k, v in (("rollout", _r(rollout_s)), ("train", _r(train_s))) if v is not None},
        "share_of_step": {},
        "train_s": _r(train_s),
        "rollout_s": _r(rollout_s),
        "train_phases": ["stage annotations" if any(l.stages for l in train) else "active window"],
        "rollout_phases": ["rollout wall time"],
        "rollout_per_train": _r(rollout_s / train_s) if rollout_s and train_s else None,
        "straggler_proxy": None,
    }


def _round_step(lanes: list[LaneStats]) -> Optional[int]:
    steps = {l.step for l in lanes if l.step is not None}
    return steps.pop() if len(steps) == 1 else None


# ================================================================================================ rollout tail
def rollout_rounds(lanes: list[LaneStats]) -> list[list[LaneStats]]:
    """Group rollout lanes into rounds (one per profiled step): by step when every lane names one,
    else by overlap in time (lanes of one round run concurrently)."""
    active = [l for l in lanes if l.has_activity]
    if not active:
        return []
    if all(l.step is not None for l in active):
        groups: dict = defaultdict(list)
        for l in active:
            groups[l.step].append(l)
        return [groups[s] for s in sorted(groups)]
    active.sort(key=lambda l: l.first_us)
    rounds: list[list[LaneStats]] = [[active[0]]]
    end = active[0].last_us
    for l in active[1:]:
        if l.first_us < end:
            rounds[-1].append(l)
            end = max(end, l.last_us)
        else:
            rounds.append([l])
            end = l.last_us
    return rounds


def tail_of_round(lanes: list[LaneStats], running_below: float) -> dict:
    n = len(lanes)
    t0 = min(l.first_us for l in lanes)
    t1 = max(l.last_us for l in lanes)
    wall = t1 - t0
    ends = sorted(l.last_us for l in lanes)
    # The tail starts when so many lanes have finished that fewer than running_below * n still run:
    # after the k-th finish, with k the smallest count such that n - k < running_below * n.
    k = int(math.floor(n - running_below * n + 1e-9)) + 1
    tail_start = ends[k - 1] if k <= n else t1
    tail = max(0.0, t1 - tail_start)
    running = busy = 0.0
    for l in lanes:
        lo = max(l.first_us, tail_start)
        if l.last_us > lo:
            running += l.last_us - lo
            busy += l.busy_between(lo, l.last_us)
    return {
        "step": _round_step(lanes),
        "lanes": [{"label": l.label, "start_s": _r((l.first_us - t0) / 1e6), "end_s": _r((l.last_us - t0) / 1e6),
                   "busy_s": _r(l.busy_us / 1e6), "source": l.source} for l in sorted(lanes, key=lambda l: l.label)],
        "n_lanes": n,
        "t0_us": t0,
        "wall_s": _r(wall / 1e6),
        "tail_start_s": _r((tail_start - t0) / 1e6),
        "tail_s": _r(tail / 1e6),
        "tail_fraction": _r(tail / wall) if wall > 0 else None,
        "straggler_s": _r((t1 - ends[0]) / 1e6),
        "straggler_fraction": _r((t1 - ends[0]) / wall) if wall > 0 else None,
        "free_fraction_in_tail": _r(1.0 - busy / running) if running > 0 else None,
    }


def rollout_tail(rounds: list[list[LaneStats]], settings: Settings, phases: Optional[dict]) -> dict:
    out = {"definition": f"share of rollout wall time during which fewer than {settings.tail_running_below:g} of "
                         "the lanes (replicas/ranks) are still generating",
           "rounds": [tail_of_round(r, settings.tail_running_below) for r in rounds]}
    fr = [r["tail_fraction"] for r in out["rounds"] if r["tail_fraction"] is not None and r["n_lanes"] >= 3]
    st = [r["straggler_fraction"] for r in out["rounds"] if r["straggler_fraction"] is not None and r["n_lanes"] >= 2]
    ft = [r["free_fraction_in_tail"] for r in out["rounds"] if r["free_fraction_in_tail"] is not None and r["tail_s"]]
    out["tail_fraction"] = _r(sum(fr) / len(fr)) if fr else None
    out["straggler_fraction"] = _r(sum(st) / len(st)) if st else None
    out["free_fraction_in_tail"] = _r(sum(ft) / len(ft)) if ft else None
    out["metrics_straggler_proxy"] = phases.get("straggler_proxy") if phases else None
    lanes = max((r["n_lanes"] for r in out["rounds"]), default=0)
    if lanes < 3:
        out["note"] = (f"{lanes} rollout lane(s) per round: the tail needs at least 3 (fewer than half of 1 or 2 lanes "
                       "running means none). Profile more replicas, e.g. +profile=npu_rollout_tail or "
                       "actor_rollout_ref.rollout.profiler.all_ranks=True.")
    return out


# ================================================================================================ free / comm / ops
def time_split(lanes: list[LaneStats]) -> Optional[dict]:
    lanes = [l for l in lanes if l.window_us > 0]
    if not lanes:
        return None
    window = sum(l.window_us for l in lanes)
    free = sum(l.free_us for l in lanes)
    comm = sum(l.comm_us for l in lanes)
    not_ov = sum(l.comm_not_overlapped_us for l in lanes)
    return {
        "lanes": len(lanes),
        "basis": sorted({l.basis for l in lanes}),
        "overlap_basis": sorted({l.overlap_basis for l in lanes}),
        "window_s": _r(window / 1e6),
        "busy_s": _r(sum(l.busy_us for l in lanes) / 1e6),
        "free_s": _r(free / 1e6),
        "free_fraction": _r(free / window),
        "comm_s": _r(comm / 1e6),
        "comm_not_overlapped_s": _r(not_ov / 1e6),
        "comm_not_overlapped_fraction": _r(not_ov / window),
        "comm_overlapped_share": _r(1.0 - not_ov / comm) if comm > 0 else None,
    }


def top_ops(lanes: list[LaneStats], n: int) -> Optional[dict]:
    device = [l for l in lanes if l.basis == "device kernels"]
    use = device or lanes
    merged: dict[str, list] = {}
    types: dict[str, str] = {}
    for l in use:
        for name, (count, total) in l.ops.items():
            acc = merged.setdefault(name, [0, 0.0])
            acc[0] += count
            acc[1] += total
        types.update(l.op_types)
    if not merged:
        return None
    grand = sum(v[1] for v in merged.values()) or 1.0
    rows = sorted(merged.items(), key=lambda kv: -kv[1][1])[:n]
    out = {
        "basis": "device kernels" if device else "host ops (self time)",
        "total_s": _r(grand / 1e6),
        "distinct": len(merged),
        "rows": [{"name": k, "type": types.get(k, ""), "count": c, "total_ms": _r(t / 1e3, 3),
                  "avg_us": _r(t / c, 3) if c else None, "share": _r(t / grand, 4)} for k, (c, t) in rows],
    }
    host: dict[str, list] = {}
    for l in lanes:
        for name, (count, h, d) in l.host_ops.items():
            acc = host.setdefault(name, [0, 0.0, 0.0])
            acc[0] += count
            acc[1] += h
            acc[2] += d
    if host:
        hrows = sorted(host.items(), key=lambda kv: -kv[1][1])[:n]
        out["host_ops"] = [{"name": k, "count": int(c), "host_self_ms": _r(h / 1e3, 3), "device_self_ms": _r(d / 1e3, 3)}
                           for k, (c, h, d) in hrows]
    return out
