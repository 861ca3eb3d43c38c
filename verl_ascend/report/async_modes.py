"""Rollout and training on one time axis, for upstream's asynchronous trainer modes.

Upstream verl 0.9.1 runs a step in one of three ways (its trainer mode): ``sync`` and
``colocate_async`` share one pool of devices between rollout and training (they take turns; the async
one keeps sampling ahead with partial rollout), ``separate_async`` gives rollout a pool of its own
that samples while the trainer pool trains, and moves the weights between them through a checkpoint
engine. What such a run is worth is how much of the wall time both pools work at once (overlap),
how long each pool waits (idle), what the weight sync costs, and how stale the trained samples are.

Two sources, the better one used when present:

* traces (``+profile=...``): one lane per pool and role -- trainer pool / train (the actor's stages),
  trainer pool / rollout (replicas colocated with training), rollout pool / rollout (separate_async's
  own replicas) -- from each trace's spans of activity on the traces' common clock, inside the
  profiled window (Kineto's start-to-stop);
* metrics only (upstream's ``timing_s/*`` per step): the steps laid end to end, each as
  [wait for samples][train][rest][weight sync]. The trainer pool is exact at that grain; upstream
  logs no busy time of the rollout pool, so in separate_async it is bounded: it generated at least
  while the trainer waited for samples and at most outside the weight sync (overlap and its idle
  time are then ranges).

Weight sync comes from the metrics (``timing_s/update_weights`` per step; the engine's own
``weight_sync/*`` where it logs them: verl.cpu's gloo engine), staleness from upstream's
``training/off_policy/trajectory_staleness/*``. A sync run gets no section: its report is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from verl_ascend.report import intervals
from verl_ascend.report.intervals import Blocks
from verl_ascend.report.lanes import LaneStats
from verl_ascend.report.run_settings import RunSettings
from verl_ascend.report.settings import Settings
from verl_ascend.trainer_mode import ASYNC_MODES, SEPARATE, SYNC
from verl_ascend.trainer_mode import KEY as MODE_KEY

TRAINER, ROLLOUT = "trainer", "rollout"
SYNC_LANE = "weight sync"


def _r(x: Optional[float], nd: int = 6) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


def _empty() -> Blocks:
    return Blocks(np.zeros(0), np.zeros(0))


def _blocks(pairs: list[tuple[float, float]]) -> Blocks:
    pairs = [(a, b) for a, b in pairs if b > a]
    if not pairs:
        return _empty()
    starts, ends = (np.array(x, dtype=np.float64) for x in zip(*pairs))
    return intervals.merge(starts, ends)


@dataclass
class PoolLane:
    """One pool's role on the common time axis (µs: absolute for traces, from the run's start for metrics)."""

    pool: str  # "trainer" | "rollout"
    role: str  # "train" | "rollout" | "weight sync"
    spans: Blocks
    sources: list[str] = field(default_factory=list)
    # Metrics only: where the lane may also have been busy (the rollout pool's unlogged time).
    maybe: Blocks = field(default_factory=_empty)

    @property
    def label(self) -> str:
        return "both pools / weight sync" if self.role == SYNC_LANE else f"{self.pool} pool / {self.role}"


# ================================================================================================ the mode
def detect_mode(forced: Optional[str], run: RunSettings, values: dict[int, dict], lanes: list[LaneStats],
                settings: Settings) -> tuple[str, str]:
    """(mode, how it was told): the --trainer-mode flag, the run config, metrics only separate_async logs,
    or traces where rollout and training were busy at the same time; else sync."""
    if forced:
        return forced, "--trainer-mode"
    mode = run.config(MODE_KEY) if run.has_config else None
    if mode is not None:
        return (mode if mode in ASYNC_MODES else SYNC), f"run config ({MODE_KEY})"
    for step in values.values():
        for key in step:
            if any(r.search(key) for r in settings.separate_marker_res):
                return SEPARATE, f"metrics ({key} is logged by separate_async only)"
    train = intervals.union(*[l.spans for l in lanes if l.kind == "train"])
    rollout = intervals.union(*[l.spans for l in lanes if l.kind == "rollout"])
    if intervals.intersect_length(train, rollout) > 0:
        return SEPARATE, "traces (rollout and training busy at the same time)"
    return SYNC, "no run config, no separate_async metric, traces without concurrent rollout and training"


# ================================================================================================ traces
def _rollout_pool_replicas(run: RunSettings) -> Optional[range]:
    """separate_async's standalone replicas from the run config (upstream's numbering), or None."""
    if not run.has_config:
        return None
    from verl_ascend.run.trace_check import pools

    merged: dict = {}
    for tree in run.configs:
        if isinstance(tree, dict):
            merged = {**tree, **merged}
    geometry = pools(merged)
    return geometry.rollout if geometry is not None else None


def lanes_from_traces(lanes: list[LaneStats], mode: str, run: RunSettings) -> tuple[list[PoolLane], str]:
    """The pool/role lanes of the traces, and how rollout replicas were put into pools."""
    train = [l for l in lanes if l.kind == "train" and len(l.spans.starts)]
    rollout = [l for l in lanes if l.kind == "rollout" and l.replica is not None]
    train_spans = intervals.union(*[l.spans for l in train])
    pool_replicas = _rollout_pool_replicas(run) if mode == SEPARATE else None
    basis = "one pool" if mode != SEPARATE else (
        "run config (replicas numbered after the trainer pool's)" if pool_replicas is not None
        else "behaviour (a replica that generated in the profiled window is the rollout pool's: upstream puts the "
             "trainer pool's replicas to sleep for the step, unless hybrid_rollout.enable_switch lends them back; "
             "--run-config gives the exact split)")
    by_pool: dict[str, list[LaneStats]] = {TRAINER: [], ROLLOUT: []}
    if mode == SEPARATE:
        if pool_replicas is None:
            busy_replicas = {l.replica for l in rollout if len(l.spans.starts)}
            # Upstream numbers the rollout pool's replicas after the trainer pool's.
            pool_replicas = range(min(busy_replicas), max(l.replica for l in rollout) + 1) if busy_replicas else range(0)
        for l in rollout:
            by_pool[ROLLOUT if l.replica in pool_replicas else TRAINER].append(l)
    else:
        by_pool[TRAINER] = rollout
    out = []
    if train:
        out.append(PoolLane(TRAINER, "train", train_spans, [l.source for l in train]))
    for pool in (TRAINER, ROLLOUT):
        group = by_pool[pool]
        if group:
            out.append(PoolLane(pool, "rollout", intervals.union(*[l.spans for l in group]),
                                [l.source for l in sorted(group, key=lambda l: (l.replica, l.source))]))
    return out, basis


def trace_windows(lanes: list[LaneStats]) -> list[tuple[float, float]]:
    """Profiled windows (µs, absolute): traces whose windows overlap in time belong to one; a window
    runs from the first profiler start to the last stop (activity where a trace has no Kineto window)."""
    spans = []
    for l in lanes:
        lo = l.profiled_first_us if not math.isnan(l.profiled_first_us) else l.spans.first
        hi = l.profiled_last_us if not math.isnan(l.profiled_last_us) else l.spans.last
        if not (math.isnan(lo) or math.isnan(hi)) and hi > lo:
            spans.append((lo, hi))
    b = _blocks(spans)
    return list(zip(b.starts.tolist(), b.ends.tolist()))


# ================================================================================================ metrics
def _phase(step: dict, names: list[str]) -> float:
    return sum(float(step.get(f"timing_s/{n}", 0.0) or 0.0) for n in names)


def lanes_from_metrics(values: dict[int, dict], mode: str, settings: Settings) -> tuple[list[PoolLane], list[dict]]:
    """Each step laid end to end as [wait][train][rest][weight sync] (µs from the first step's start)."""
    t0 = 0.0
    train, sync, rollout, maybe, rows = [], [], [], [], []
    for step in sorted(values):
        v = values[step]
        total = float(v.get(f"timing_s/{settings.total_phase}", 0.0) or 0.0)
        if total <= 0:
            continue
        wait = min(_phase(v, settings.async_wait_phases), total)
        work = min(_phase(v, settings.train_phases), total - wait)
        sw = min(_phase(v, settings.async_sync_phases), total - wait - work)
        rest = total - wait - work - sw
        us = 1e6
        a, b, c, d = t0, t0 + wait * us, t0 + (wait + work) * us, t0 + (total - sw) * us
        train.append((b, c))
        sync.append((d, t0 + total * us))
        if mode == SEPARATE:
            rollout.append((a, b))  # the trainer waited for samples: the rollout pool was generating them
            maybe.append((b, d))  # not logged: it may have generated (ahead) until the weight sync
        else:
            rollout.append((a, b))  # one pool: rollout takes its turn while the trainer waits for it
        rows.append({"step": step, "step_s": _r(total), "wait_s": _r(wait), "train_s": _r(work), "sync_s": _r(sw),
                     "rest_s": _r(rest)})
        t0 += total * us
    pool = ROLLOUT if mode == SEPARATE else TRAINER
    out = [PoolLane(TRAINER, "train", _blocks(train)), PoolLane(pool, "rollout", _blocks(rollout), maybe=_blocks(maybe)),
           PoolLane(TRAINER, SYNC_LANE, _blocks(sync))]
    return out, rows


# ================================================================================================ numbers
def measure(lanes: list[PoolLane], lo: float, hi: float, mode: str) -> dict:
    """Overlap and per-pool busy / sync / idle inside [lo, hi) (µs)."""
    wall = hi - lo
    clip = {id(l): intervals.clip(l.spans, lo, hi) for l in lanes}
    maybe = {id(l): intervals.clip(l.maybe, lo, hi) for l in lanes}
    train = intervals.union(*[clip[id(l)] for l in lanes if l.role == "train"])
    rollout = intervals.union(*[clip[id(l)] for l in lanes if l.role == "rollout"])
    rollout_max = intervals.union(rollout, *[maybe[id(l)] for l in lanes if l.role == "rollout"])
    sync = intervals.union(*[clip[id(l)] for l in lanes if l.role == SYNC_LANE])
    roles = {l.role for l in lanes}
    both = "train" in roles and "rollout" in roles  # else nothing to overlap with: not measured
    overlap = intervals.intersect_length(train, rollout)
    overlap_max = intervals.intersect_length(train, rollout_max)
    out = {
        "wall_s": _r(wall / 1e6),
        "overlap_s": _r(overlap / 1e6) if both else None,
        "overlap_fraction": (_r(overlap / wall) if wall > 0 else None) if both else None,
        "lanes": [{"label": l.label, "pool": l.pool, "role": l.role, "busy_s": _r(clip[id(l)].length / 1e6),
                   "maybe_s": _r(maybe[id(l)].length / 1e6) if len(l.maybe.starts) else None,
                   "sources": l.sources} for l in lanes],
        "pools": {},
    }
    if overlap_max > overlap:
        out["overlap_max_s"] = _r(overlap_max / 1e6)
        out["overlap_max_fraction"] = _r(overlap_max / wall) if wall > 0 else None
    pools = [TRAINER] + ([ROLLOUT] if mode == SEPARATE else [])
    for pool in [p for p in pools if any(l.pool == p for l in lanes)]:  # a pool without a lane was not traced
        work = intervals.union(*[clip[id(l)] for l in lanes if l.pool == pool and l.role != SYNC_LANE])
        could = intervals.union(work, *[maybe[id(l)] for l in lanes if l.pool == pool])
        in_sync = sync.length - intervals.intersect_length(sync, work)
        idle = max(0.0, wall - work.length - in_sync)
        entry = {"busy_s": _r(work.length / 1e6), "sync_s": _r(in_sync / 1e6), "idle_s": _r(idle / 1e6),
                 "idle_fraction": _r(idle / wall) if wall > 0 else None}
        if could.length > work.length:
            idle_min = max(0.0, wall - could.length - (sync.length - intervals.intersect_length(sync, could)))
            entry["idle_min_s"] = _r(idle_min / 1e6)
            entry["idle_min_fraction"] = _r(idle_min / wall) if wall > 0 else None
        out["pools"][pool] = entry
    return out


def _total(windows: list[dict], mode: str) -> dict:
    wall = sum(w["wall_s"] for w in windows)
    measured = all(w["overlap_s"] is not None for w in windows)
    out = {"wall_s": _r(wall), "overlap_s": _r(sum(w["overlap_s"] for w in windows)) if measured else None}
    out["overlap_fraction"] = _r(out["overlap_s"] / wall) if wall > 0 and measured else None
    if any("overlap_max_s" in w for w in windows):
        mx = sum(w.get("overlap_max_s", w["overlap_s"]) for w in windows)
        out["overlap_max_s"], out["overlap_max_fraction"] = _r(mx), _r(mx / wall) if wall > 0 else None
    out["pools"] = {}
    for pool in windows[0]["pools"]:
        entry = {k: _r(sum(w["pools"][pool][k] for w in windows)) for k in ("busy_s", "sync_s", "idle_s")}
        entry["idle_fraction"] = _r(entry["idle_s"] / wall) if wall > 0 else None
        if any("idle_min_s" in w["pools"][pool] for w in windows):
            m = sum(w["pools"][pool].get("idle_min_s", w["pools"][pool]["idle_s"]) for w in windows)
            entry["idle_min_s"], entry["idle_min_fraction"] = _r(m), _r(m / wall) if wall > 0 else None
        out["pools"][pool] = entry
    return out


def weight_sync(values: dict[int, dict], settings: Settings) -> Optional[dict]:
    """Per-step weight-sync time (trainer's timer) and the engine's own per-sync figures."""
    timed = [(s, _phase(v, settings.async_sync_phases)) for s, v in values.items()
             if any(f"timing_s/{n}" in v for n in settings.async_sync_phases)]
    steps = [float(v.get(f"timing_s/{settings.total_phase}", 0.0) or 0.0) for s, v in values.items()]
    if not timed:
        return None
    total = sum(t for _, t in timed)
    out = {"phases": [f"timing_s/{n}" for n in settings.async_sync_phases], "steps": len(timed),
           "mean_s": _r(total / len(timed)), "max_s": _r(max(t for _, t in timed)), "total_s": _r(total),
           "share_of_step": _r(total / sum(steps)) if sum(steps) > 0 else None}
    prefix = settings.engine_prefix
    engine: dict[str, list[float]] = {}
    for v in values.values():
        for key, value in v.items():
            if key.startswith(prefix) and isinstance(value, (int, float)) and math.isfinite(value):
                engine.setdefault(key[len(prefix):], []).append(float(value))
    if engine:
        out["engine"] = {f"{prefix}{k}": {"mean": _r(sum(x) / len(x)), "max": _r(max(x)), "n": len(x)}
                         for k, x in sorted(engine.items())}
        secs = next((x for k, x in engine.items() if k.endswith("seconds")), None)
        mbs = next((x for k, x in engine.items() if k.endswith("megabytes")), None)
        if secs and mbs and sum(secs) > 0:
            out["engine_mb_per_s"] = _r(sum(mbs) / sum(secs), 3)
    return out


def staleness(values: dict[int, dict], settings: Settings) -> Optional[dict]:
    """Upstream's staleness of the trained samples (weight versions behind), per step and over the run."""
    p = settings.staleness_prefix
    rows = [{"step": s, "mean": v.get(f"{p}/mean"), "max": v.get(f"{p}/max"), "worst_max": v.get(f"{p}_worst/max")}
            for s, v in sorted(values.items()) if f"{p}/mean" in v or f"{p}/max" in v]
    if not rows:
        return None
    means = [r["mean"] for r in rows if r["mean"] is not None]
    maxes = [r["max"] for r in rows if r["max"] is not None]
    worst = [r["worst_max"] for r in rows if r["worst_max"] is not None]
    return {"metric": p, "steps": len(rows), "mean": _r(sum(means) / len(means)) if means else None,
            "max": _r(max(maxes)) if maxes else None, "worst_max": _r(max(worst)) if worst else None,
            "per_step": [{k: _r(v) if k != "step" else v for k, v in r.items()} for r in rows]}


# ================================================================================================ section
@dataclass
class AsyncView:
    data: dict
    lanes: list[PoolLane]  # what the plot draws
    windows: list[tuple[float, float]]  # µs, on the lanes' axis


def build(mode_flag: Optional[str], run: RunSettings, values: dict[int, dict], lanes: list[LaneStats],
          settings: Settings) -> Optional[AsyncView]:
    """The asynchronous modes' section, or None for a sync run (its report stays as it was)."""
    mode, mode_basis = detect_mode(mode_flag, run, values, lanes, settings)
    if mode not in ASYNC_MODES:
        return None
    data: dict = {"mode": mode, "mode_basis": mode_basis}
    pool_lanes, windows = [], []
    traced = [l for l in lanes if len(l.spans.starts) or not math.isnan(l.profiled_first_us)]
    if traced:
        pool_lanes, pools_basis = lanes_from_traces(traced, mode, run)
        windows = trace_windows(traced)
        data.update(basis="traces", pools_basis=pools_basis,
                    note="a profiled step also carries the profilers' own start, stop and export (per stage with "
                         "discrete traces), which shows here as idle time; compare pools and steps within one profile.")
    elif values:
        pool_lanes, rows = lanes_from_metrics(values, mode, settings)
        spans = [l.spans for l in pool_lanes]
        hull = intervals.union(*spans, *[l.maybe for l in pool_lanes])
        windows = [(0.0, hull.last)] if len(hull.starts) else []
        data.update(basis="metrics", per_step=rows,
                    note="upstream logs no busy time of the rollout pool: in separate_async it generated at least "
                         "while the trainer waited for samples and at most until the weight sync; overlap and its "
                         "idle time are ranges. Profile a step (+profile=...) for the measured figures."
                    if mode == SEPARATE else
                    "one pool: rollout takes its turns while the trainer waits for samples (partial rollout keeps "
                    "sampling ahead), so rollout and training do not overlap.")
    if windows and pool_lanes:
        measured = [measure(pool_lanes, lo, hi, mode) for lo, hi in windows]
        for w, (lo, hi) in zip(measured, windows):
            w["t0_us"] = lo
        data["windows"] = measured
        data.update(_total(measured, mode))
    data["weight_sync"] = weight_sync(values, settings)
    data["staleness"] = staleness(values, settings)
    return AsyncView(data, pool_lanes, windows)


# ================================================================================================ text
def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def render(d: dict) -> list[str]:
    out = ["7. Asynchronous modes: rollout and training on one time axis"]
    out.append(f"   mode {d['mode']} (from {d['mode_basis']})")
    if d.get("windows"):
        if d["basis"] == "traces":
            out.append(f"   from traces: {len(d['windows'])} profiled window(s), {d['wall_s']:.3f} s; rollout replicas "
                       f"in pools by {d['pools_basis']}")
        else:
            out.append(f"   from metrics (timing_s/* per step, coarse): {len(d['per_step'])} step(s), {d['wall_s']:.3f} s")
        out.append(f"   {'lane':<30}{'busy s':>10}{'share':>9}")
        for lane in _merged_lanes(d["windows"]):
            share = lane["busy_s"] / d["wall_s"] if d["wall_s"] else None
            extra = f"  (+ up to {lane['maybe_s']:.3f} s not logged)" if lane.get("maybe_s") else ""
            out.append(f"   {lane['label']:<30}{lane['busy_s']:>10.3f}{_pct(share):>9}{extra}")
        if d["overlap_s"] is None:
            ov = ("   overlap: n/a -- the traces hold only one role; profile training and rollout together "
                  "(+profile=cpu, or an npu_* profile with the other role's profiler.enable=true)")
        else:
            ov = f"   overlap (both pools busy) {d['overlap_s']:.3f} s = {_pct(d['overlap_fraction'])} of the wall time"
        if "overlap_max_s" in d:
            ov += f" .. at most {d['overlap_max_s']:.3f} s = {_pct(d['overlap_max_fraction'])}"
        out.append(ov)
        if d["mode"] == SEPARATE and ROLLOUT not in d["pools"]:
            out.append("   rollout pool: not traced -- select one of its replicas (actor_rollout_ref.rollout.profiler.ranks "
                       "from trainer.nnodes x trainer.n_gpus_per_node on, or all_ranks=true; the trace check names the rank)")
        for pool, p in d["pools"].items():
            idle = f"{p['idle_s']:.3f} s ({_pct(p['idle_fraction'])})"
            if "idle_min_s" in p:
                idle = f"{p['idle_min_s']:.3f} .. {idle}"
            out.append(f"   {pool} pool idle {idle}; busy {p['busy_s']:.3f} s, in weight sync {p['sync_s']:.3f} s")
        if d.get("note"):
            out.append(f"   note: {d['note']}")
    else:
        out.append("   lanes: n/a (no trace and no timed step)")
    ws = d.get("weight_sync")
    if ws:
        line = (f"   weight sync ({', '.join(ws['phases'])}): {ws['mean_s']:.3f} s a step (max {ws['max_s']:.3f}), "
                f"{ws['total_s']:.3f} s over {ws['steps']} step(s) = {_pct(ws['share_of_step'])} of step time")
        out.append(line)
        for key, e in (ws.get("engine") or {}).items():
            out.append(f"     {key}: mean {e['mean']:g}, max {e['max']:g} over {e['n']} sync(s)")
        if ws.get("engine_mb_per_s") is not None:
            out.append(f"     engine transfer rate {ws['engine_mb_per_s']:g} MB/s")
    else:
        out.append("   weight sync: n/a (no timing_s/update_weights in the metrics)")
    st = d.get("staleness")
    if st:
        out.append(f"   staleness ({st['metric']}): mean {st['mean']:g}, max {st['max']:g}"
                   + (f", worst {st['worst_max']:g}" if st.get("worst_max") is not None else "")
                   + f" weight version(s) behind over {st['steps']} step(s)")
    else:
        out.append("   staleness: n/a (no training/off_policy/trajectory_staleness metrics)")
    out.append("   reading: overlap near the smaller of rollout and training per step is the most asynchrony can give; "
               "an idle rollout pool means it waits for prompts or for the staleness bound "
               "(trainer.v1.sampler.max_off_policy_threshold); an idle trainer pool means rollout is the bottleneck.")
    out.append("   note: in these modes timing_s/gen (section 1's rollout phase) is the trainer's wait for samples, "
               "not the rollout's own time; read rollout here.")
    return out


def _merged_lanes(windows: list[dict]) -> list[dict]:
    merged: dict[str, dict] = {}
    for w in windows:
        for lane in w["lanes"]:
            m = merged.setdefault(lane["label"], {"label": lane["label"], "busy_s": 0.0, "maybe_s": 0.0})
            m["busy_s"] += lane["busy_s"] or 0.0
            m["maybe_s"] += lane.get("maybe_s") or 0.0
    return list(merged.values())
