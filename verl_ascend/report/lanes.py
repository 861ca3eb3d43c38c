"""Per-lane statistics: what one rank or replica did in one profiled window.

A *lane* is the output of one profiled process for one window: one Chrome trace file (torch or vLLM
writes one per rank and start/stop), or one ``*_ascend_pt`` directory of torch_npu. This module turns
a lane's events into the few numbers the report needs -- busy / compute / communication time, free
time, the top kernels or ops, stage annotations, fused-kernel hits -- and a compact busy curve, then
drops the events. Only one lane's events are in memory at a time.

Why events are kept in typed arrays and not Python objects: a 1 GB trace holds millions of events;
at ~20 bytes each in ``array`` buffers they cost tens of MB, as Python tuples they would cost GBs.
"""

from __future__ import annotations

import gc
import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from verl_ascend.report import intervals
from verl_ascend.report.ascend_csv import (
    KERNEL_DETAILS,
    OPERATOR_DETAILS,
    STEP_TRACE,
    KernelDetails,
    read_operator_details,
    read_step_trace_time,
)
from verl_ascend.report.chrome_trace import ChromeTraceReader, TraceFormatError, TraceTruncatedError
from verl_ascend.report.problems import InputFormatError, InputProblem
from verl_ascend.report.settings import Settings

# Event classes kept in the per-lane arrays.
_OTHER, _KERNEL, _HOST = 0, 1, 2
# Categories that never describe work on the device or in an operator: skipped at read time.
_IGNORED_CATEGORIES = frozenset(
    {"Trace", "cuda_runtime", "cuda_driver", "python_function", "ac2g", "fwdbwd", "overhead", "cpu_instant_event"}
)


@dataclass
class LaneStats:
    kind: str  # "rollout" or "train"
    label: str  # e.g. "replica0", "rank0", "replica1/rank9"
    source: str
    fmt: str  # "chrome" or "ascend"
    replica: Optional[int] = None
    rank: Optional[int] = None
    step: Optional[int] = None
    platform: str = "cpu"  # "npu", "gpu" or "cpu": what executed the measured work
    basis: str = "host ops"  # "device kernels" or "host ops"
    first_us: float = math.nan  # absolute µs (comparable across lanes)
    last_us: float = math.nan
    busy_us: float = 0.0
    compute_us: float = 0.0
    comm_us: float = 0.0
    comm_not_overlapped_us: float = 0.0
    free_us: float = 0.0
    window_us: float = 0.0
    overlap_basis: str = "intervals"
    ops: dict[str, list] = field(default_factory=dict)  # name -> [count, total µs]
    op_types: dict[str, str] = field(default_factory=dict)  # kernel name -> kernel type (Ascend CSV)
    host_ops: dict[str, list] = field(default_factory=dict)  # operator_details: name -> [count, host µs, device µs]
    fused_hits: dict[str, int] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)  # annotation name -> total µs
    curve_grid: np.ndarray = field(default_factory=lambda: np.zeros(0))
    curve_cum: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Spans of activity (busy blocks, gaps up to async_modes.gap_ms closed), absolute µs: the lane on
    # the common time axis of the asynchronous modes' timeline.
    spans: intervals.Blocks = field(default_factory=lambda: intervals.Blocks(np.zeros(0), np.zeros(0)))
    profiled_first_us: float = math.nan  # the profiler's window (Kineto's "Trace" event), absolute µs
    profiled_last_us: float = math.nan
    events: int = 0
    partial: bool = False
    problems: list[InputProblem] = field(default_factory=list)

    @property
    def has_activity(self) -> bool:
        return not math.isnan(self.first_us) and self.last_us > self.first_us

    def busy_between(self, lo: float, hi: float) -> float:
        return intervals.busy_between(self.curve_grid, self.curve_cum, lo, hi)

    def summary(self) -> dict:
        return {
            "kind": self.kind, "label": self.label, "source": self.source, "format": self.fmt,
            "replica": self.replica, "rank": self.rank, "step": self.step, "platform": self.platform,
            "basis": self.basis, "first_us": _num(self.first_us), "last_us": _num(self.last_us),
            "window_s": self.window_us / 1e6, "busy_s": self.busy_us / 1e6, "compute_s": self.compute_us / 1e6,
            "comm_s": self.comm_us / 1e6, "comm_not_overlapped_s": self.comm_not_overlapped_us / 1e6,
            "free_s": self.free_us / 1e6, "overlap_basis": self.overlap_basis, "events": self.events,
            "stages_s": {k: v / 1e6 for k, v in self.stages.items()}, "partial": self.partial,
        }


def _num(x: float) -> Optional[float]:
    return None if x is None or math.isnan(x) else x


class _EventArrays:
    """Typed, append-only columns of the events of one lane."""

    def __init__(self) -> None:
        self.ts = array("d")
        self.dur = array("f")
        self.name = array("i")
        self.thread = array("i")
        self.code = array("b")
        self.names: dict[str, int] = {}
        self.name_list: list[str] = []

    def name_id(self, name: str) -> int:
        nid = self.names.get(name)
        if nid is None:
            nid = self.names[name] = len(self.name_list)
            self.name_list.append(name)
        return nid

    def numpy(self) -> tuple[np.ndarray, ...]:
        n = len(self.ts)
        return (
            np.frombuffer(self.ts, dtype=np.float64, count=n) if n else np.zeros(0),
            np.frombuffer(self.dur, dtype=np.float32, count=n) if n else np.zeros(0, np.float32),
            np.frombuffer(self.name, dtype=np.int32, count=n) if n else np.zeros(0, np.int32),
            np.frombuffer(self.thread, dtype=np.int32, count=n) if n else np.zeros(0, np.int32),
            np.frombuffer(self.code, dtype=np.int8, count=n) if n else np.zeros(0, np.int8),
        )


# ================================================================================================ Chrome traces
def analyze_chrome_trace(path: str, lane: LaneStats, settings: Settings) -> LaneStats:
    """Fill ``lane`` from one Chrome trace file. Format errors become problems; events read before a
    truncation are kept (``lane.partial``). Raises InputFormatError when nothing usable was read."""
    reader = ChromeTraceReader(path)
    cols = _EventArrays()
    threads: dict[tuple, int] = {}
    thread_keys: list[tuple] = []
    proc_names: dict = {}
    thread_names: dict = {}
    annotations: list[tuple[str, float, float]] = []
    window: list[float] = []
    kernel_cats = settings.kernel_categories
    host_cats = settings.host_op_categories
    annot_cats = settings.annotation_categories
    bad = 0
    ts_append, dur_append = cols.ts.append, cols.dur.append
    name_append, thread_append, code_append = cols.name.append, cols.thread.append, cols.code.append
    names_get = cols.names.get
    gc_was_enabled = gc.isenabled()
    gc.disable()  # event dicts are acyclic; collecting them mid-stream only costs time
    try:
        for batch in reader.batches():
            for ev in batch:
                if type(ev) is not dict:
                    bad += 1
                    continue
                ph = ev.get("ph")
                if ph == "X":
                    cat = ev.get("cat")
                    if cat in _IGNORED_CATEGORIES:
                        if cat == "Trace":  # the profiler's own window (Kineto): start to stop
                            _note_window(window, ev)
                        continue
                    try:
                        t = ev["ts"]
                        if type(t) is not float:
                            t = float(t)
                        d = ev.get("dur", 0.0)
                        if type(d) is not float:
                            d = float(d)
                    except (KeyError, TypeError, ValueError):
                        bad += 1
                        continue
                    name = ev.get("name", "")
                    if type(name) is not str:
                        name = str(name)
                    if cat in annot_cats:
                        annotations.append((name, t, d))
                        continue
                    key = (ev.get("pid"), ev.get("tid"))
                    tidx = threads.get(key)
                    if tidx is None:
                        tidx = threads[key] = len(thread_keys)
                        thread_keys.append(key)
                    nid = names_get(name)
                    if nid is None:
                        nid = cols.name_id(name)
                    ts_append(t)
                    dur_append(d)
                    name_append(nid)
                    thread_append(tidx)
                    code_append(_KERNEL if cat in kernel_cats else _HOST if cat in host_cats else _OTHER)
                elif ph == "M":
                    meta = ev.get("name")
                    args = ev.get("args")
                    label = args.get("name") if isinstance(args, dict) else None
                    if meta == "process_name" and isinstance(label, str):
                        proc_names[ev.get("pid")] = label
                    elif meta == "thread_name" and isinstance(label, str):
                        thread_names[(ev.get("pid"), ev.get("tid"))] = label
    except TraceTruncatedError as e:
        lane.partial = True
        lane.problems.append(InputProblem(path, e.reason, offset=e.offset, partial=True))
    except TraceFormatError as e:
        if reader.events_read == 0:
            raise InputFormatError(InputProblem(path, e.reason, offset=e.offset)) from None
        lane.partial = True
        lane.problems.append(InputProblem(path, e.reason + "; events before it kept", offset=e.offset, partial=True))
    finally:
        if gc_was_enabled:
            gc.enable()
    lane.events = reader.events_read
    if bad:
        lane.problems.append(InputProblem(path, f"{bad} event(s) without a usable 'ts'/'dur' or not an object were skipped"))

    base = reader.metadata.get("baseTimeNanoseconds")
    offset_us = float(base) / 1000.0 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    _finish_chrome(lane, cols, thread_keys, proc_names, thread_names, annotations, offset_us, settings)
    if window:
        lane.profiled_first_us, lane.profiled_last_us = window[0] + offset_us, window[1] + offset_us
    return lane


def _note_window(window: list[float], ev: dict) -> None:
    try:
        t, d = float(ev["ts"]), float(ev.get("dur", 0.0))
    except (KeyError, TypeError, ValueError):
        return
    if window:
        window[0], window[1] = min(window[0], t), max(window[1], t + d)
    else:
        window.extend((t, t + d))


def _finish_chrome(lane, cols, thread_keys, proc_names, thread_names, annotations, offset_us, settings) -> None:
    ts, dur, nid, tid, code = cols.numpy()
    n_threads = len(thread_keys)
    dev_thread = np.zeros(n_threads, dtype=bool)
    comm_thread = np.zeros(n_threads, dtype=bool)
    overlap_thread: dict[int, str] = {}
    ascend = False
    for i, (pid, t) in enumerate(thread_keys):
        pname = proc_names.get(pid, "")
        if pname == settings.overlap_process:
            overlap_thread[i] = thread_names.get((pid, t), "")
            continue
        if any(r.search(pname) for r in settings.device_process_res):
            dev_thread[i] = True
            ascend = True  # the device process patterns name torch_npu's processes
        if any(r.search(pname) for r in settings.comm_process_res):
            comm_thread[i] = True
            dev_thread[i] = True
    is_dev = (code == _KERNEL) | (dev_thread[tid] if n_threads else np.zeros(len(ts), bool))
    if overlap_thread:
        is_dev &= ~np.isin(tid, np.fromiter(overlap_thread, dtype=np.int32))
    name_list = cols.name_list
    comm_name = np.fromiter((settings.is_comm(s) for s in name_list), dtype=bool, count=len(name_list))

    if is_dev.any():
        lane.basis = "device kernels"
        lane.platform = "npu" if ascend else "gpu"
        sel = is_dev
    else:
        lane.basis = "host ops"
        lane.platform = "cpu"
        sel = code == _HOST
    comm_mask = sel & (comm_name[nid] | comm_thread[tid]) if len(name_list) else sel & False
    comp_mask = sel & ~comm_mask
    starts = ts[comp_mask]
    comp = intervals.merge(starts, starts + dur[comp_mask])
    del starts
    starts = ts[comm_mask]
    comm = intervals.merge(starts, starts + dur[comm_mask])
    del starts
    busy = intervals.merge(np.concatenate([comp.starts, comm.starts]), np.concatenate([comp.ends, comm.ends]))
    _set_busy(lane, comp, comm, busy, offset_us, settings)

    if overlap_thread:
        sums: dict[str, float] = {}
        for i, tname in overlap_thread.items():
            m = tid == i
            sums[tname.strip().lower()] = float(dur[m].astype(np.float64).sum())
        computing = sums.get("computing", 0.0)
        not_ov = sums.get("communication(not overlapped)", 0.0)
        free = sums.get("free", 0.0)
        if computing or not_ov or free:
            lane.compute_us = computing
            lane.comm_us = sums.get("communication", lane.comm_us)
            lane.comm_not_overlapped_us = not_ov
            lane.free_us = free
            lane.window_us = computing + not_ov + free
            lane.busy_us = computing + not_ov
            lane.overlap_basis = "trace_view.json Overlap Analysis"

    # Top kernels (device) or ops by self time (host).
    if len(name_list):
        if lane.basis == "device kernels":
            counts = np.bincount(nid[sel], minlength=len(name_list))
            totals = np.bincount(nid[sel], weights=dur[sel].astype(np.float64), minlength=len(name_list))
        else:
            counts, totals = _host_self_times(ts, dur, nid, tid, sel, len(name_list))
        for i in np.flatnonzero(counts):
            lane.ops[name_list[i]] = [int(counts[i]), float(totals[i])]
        _count_fused(lane, name_list, np.bincount(nid[is_dev], minlength=len(name_list)), host=False, settings=settings)
        _count_fused(lane, name_list, np.bincount(nid[code == _HOST], minlength=len(name_list)), host=True,
                     settings=settings)

    stage_spans = []
    for name, t, d in annotations:
        if name in settings.train_stage_names:
            lane.stages[name] = lane.stages.get(name, 0.0) + d
            stage_spans.append((t + offset_us, t + d + offset_us))
    if stage_spans:  # a worker inside a training stage is busy with it, between its ops too
        starts, ends = (np.array(x, dtype=np.float64) for x in zip(*stage_spans))
        lane.spans = intervals.union(lane.spans, intervals.merge(starts, ends))
    if lane.kind == "train" and not lane.has_activity and annotations:
        first = min(t for _, t, _ in annotations)
        last = max(t + d for _, t, d in annotations)
        lane.first_us, lane.last_us = first + offset_us, last + offset_us


def _set_busy(lane: LaneStats, comp, comm, busy, offset_us: float, settings: Settings) -> None:
    lane.compute_us = comp.length
    lane.comm_us = comm.length
    lane.busy_us = busy.length
    lane.comm_not_overlapped_us = max(0.0, busy.length - comp.length)
    if len(busy.starts):
        lane.first_us = busy.first + offset_us
        lane.last_us = busy.last + offset_us
        lane.window_us = busy.last - busy.first
        lane.free_us = max(0.0, lane.window_us - busy.length)
        grid, cum = intervals.busy_curve(busy, settings.timeline_points)
        lane.curve_grid, lane.curve_cum = grid + offset_us, cum
        spans = intervals.close_gaps(busy, settings.async_gap_us)
        lane.spans = intervals.Blocks(spans.starts + offset_us, spans.ends + offset_us)


def _host_self_times(ts, dur, nid, tid, sel, n_names) -> tuple[np.ndarray, np.ndarray]:
    """Per-name call count and self time of nested host ops (a parent's time minus its children's)."""
    idx = np.flatnonzero(sel)
    if not len(idx):
        return np.zeros(n_names, np.int64), np.zeros(n_names)
    d = dur[idx].astype(np.float64)
    order = np.lexsort((-d, ts[idx], tid[idx]))  # by thread, then start, outer (longer) first
    idx = idx[order]
    d = d[order]
    s_list = ts[idx].tolist()
    e_list = (ts[idx] + d).tolist()
    th_list = tid[idx].tolist()
    self_t = d.tolist()
    stack: list[tuple[float, int]] = []
    prev = None
    for i in range(len(s_list)):
        th = th_list[i]
        s = s_list[i]
        if th != prev:
            stack.clear()
            prev = th
        while stack and stack[-1][0] <= s:
            stack.pop()
        if stack:
            parent = stack[-1][1]
            self_t[parent] -= min(e_list[i], stack[-1][0]) - s
        stack.append((e_list[i], i))
    names = nid[idx]
    counts = np.bincount(names, minlength=n_names)
    totals = np.bincount(names, weights=np.maximum(np.asarray(self_t), 0.0), minlength=n_names)
    return counts, totals


def _count_fused(lane: LaneStats, name_list: list[str], counts: np.ndarray, host: bool, settings: Settings) -> None:
    for i in np.flatnonzero(counts):
        name = name_list[i]
        if host and not name.lower().startswith("npu::"):
            continue  # a CPU aten::rms_norm is not the fused NPU kernel
        for key in settings.fused_matches(name):
            lane.fused_hits[key] = lane.fused_hits.get(key, 0) + int(counts[i])


# ================================================================================================ torch_npu output
def analyze_ascend_dir(directory: str, lane: LaneStats, settings: Settings) -> LaneStats:
    """Fill ``lane`` from one ``*_ascend_pt`` directory's ASCEND_PROFILER_OUTPUT (text export).

    kernel_details.csv gives kernels and busy intervals; step_trace_time.csv, when present, gives the
    free and un-overlapped communication time as torch_npu computed them; operator_details.csv gives
    host ops. trace_view.json is read only when kernel_details.csv is absent (it holds the same kernels).
    """
    out = Path(directory) / "ASCEND_PROFILER_OUTPUT"
    lane.platform = "npu"
    lane.fmt = "ascend"
    kd = out / KERNEL_DETAILS
    if kd.is_file():
        _read_kernel_details(str(kd), lane, settings)
    elif (out / "trace_view.json").is_file():
        analyze_chrome_trace(str(out / "trace_view.json"), lane, settings)
        lane.fmt = "ascend"
        lane.platform = "npu"
    st = out / STEP_TRACE
    if st.is_file():
        try:
            step_trace, problems = read_step_trace_time(str(st))
            lane.problems.extend(problems)
            if step_trace.total > 0:
                lane.compute_us = step_trace.computing
                lane.comm_us = step_trace.communication
                lane.comm_not_overlapped_us = step_trace.comm_not_overlapped
                lane.free_us = step_trace.free
                lane.window_us = step_trace.total
                lane.busy_us = step_trace.computing + step_trace.comm_not_overlapped
                lane.overlap_basis = "step_trace_time.csv"
        except InputFormatError as e:
            lane.problems.append(e.problem)
    # Upstream's npu tool writes a discrete stage's output under <save_path>/<stage>/; the stage then
    # lasted as long as the lane was active.
    stage = Path(directory).parent.name
    if stage in settings.train_stage_names and lane.window_us > 0:
        lane.stages[stage] = lane.window_us
    od = out / OPERATOR_DETAILS
    if od.is_file():
        try:
            ops, problems = read_operator_details(str(od))
            lane.problems.extend(problems)
            lane.host_ops = ops
            names = list(ops)
            _count_fused(lane, names, np.array([int(ops[n][0]) for n in names]), host=True, settings=settings)
        except InputFormatError as e:
            lane.problems.append(e.problem)
    return lane


def _read_kernel_details(path: str, lane: LaneStats, settings: Settings) -> None:
    cols = _EventArrays()
    types: dict[int, str] = {}
    reader = KernelDetails(path)
    try:
        for name, ktype, start, dur in reader:
            nid = cols.name_id(name)
            if ktype and nid not in types:
                types[nid] = ktype
            cols.ts.append(start)
            cols.dur.append(dur)
            cols.name.append(nid)
            cols.thread.append(0)
            cols.code.append(_KERNEL)
    except InputFormatError as e:
        if not len(cols.ts):
            raise
        lane.problems.append(InputProblem(e.problem.path, e.problem.message + "; rows before it kept",
                                          line=e.problem.line, partial=True))
        lane.partial = True
    lane.problems.extend(reader.problems)
    lane.partial = lane.partial or any(p.partial for p in reader.problems)
    lane.events = len(cols.ts)
    ts, dur, nid, _, _ = cols.numpy()
    names = cols.name_list
    kinds = [types.get(i, "") for i in range(len(names))]
    comm_name = np.fromiter((settings.is_comm(n) or settings.is_comm(k) for n, k in zip(names, kinds)),
                            dtype=bool, count=len(names))
    comm_mask = comm_name[nid] if len(names) else np.zeros(0, bool)
    comp = intervals.merge(ts[~comm_mask], ts[~comm_mask] + dur[~comm_mask])
    comm = intervals.merge(ts[comm_mask], ts[comm_mask] + dur[comm_mask])
    busy = intervals.merge(np.concatenate([comp.starts, comm.starts]), np.concatenate([comp.ends, comm.ends]))
    _set_busy(lane, comp, comm, busy, 0.0, settings)
    lane.basis = "device kernels"
    if len(names):
        counts = np.bincount(nid, minlength=len(names))
        totals = np.bincount(nid, weights=dur.astype(np.float64), minlength=len(names))
        for i in np.flatnonzero(counts):
            lane.ops[names[i]] = [int(counts[i]), float(totals[i])]
            if kinds[i]:
                lane.op_types[names[i]] = kinds[i]
        # Match fused-kernel patterns against the kernel type as well as the name.
        for i in np.flatnonzero(counts):
            hits = set(settings.fused_matches(names[i])) | (set(settings.fused_matches(kinds[i])) if kinds[i] else set())
            for key in hits:
                lane.fused_hits[key] = lane.fused_hits.get(key, 0) + int(counts[i])
