"""Shrink a real profiled run into the few-KB fixture under async_run/ (how the committed files were made).

    python tests/verl_ascend/report/data/shrink_async_run.py RUN_DIR OUT_DIR

RUN_DIR is a run's VERL_ASCEND_OUTPUT_DIR (profile/<experiment>/ and <experiment>/metrics.jsonl). Each
trace keeps its clock (baseTimeNanoseconds), the profiler's window (Kineto's "Trace" event), the
training-stage annotations, and its host ops merged into spans of activity (gaps up to GAP_US closed,
named "merged host ops"); the metrics keep the step timers, staleness and weight-sync figures. The
asynchronous modes' section of the report reads the same numbers from both (spans with gaps up to
async_modes.gap_ms >= GAP_US closed are unchanged by closing smaller gaps first).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

from verl_ascend.report.settings import load_settings

GAP_US = 5000.0
STAGES = load_settings().train_stage_names  # the training-stage annotations the report reads
KEEP_METRICS = re.compile(r"^(timing_s/|training/off_policy/trajectory_staleness|weight_sync/|actor/pg_loss$)")


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def shrink_trace(src: Path, dst: Path) -> None:
    d = _load(src)
    ops, kept = [], []
    for ev in d.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        if ev.get("cat") == "Trace" or (ev.get("cat") == "user_annotation" and ev.get("name") in STAGES):
            kept.append({k: ev[k] for k in ("ph", "cat", "name", "ts", "dur", "pid", "tid") if k in ev})
        elif ev.get("cat") == "cpu_op":
            ops.append((float(ev["ts"]), float(ev["ts"]) + float(ev.get("dur", 0.0))))
    ops.sort()
    spans: list[list[float]] = []
    for s, e in ops:
        if spans and s - spans[-1][1] <= GAP_US:
            spans[-1][1] = max(spans[-1][1], e)
        else:
            spans.append([s, e])
    events = kept + [{"ph": "X", "cat": "cpu_op", "name": "merged host ops", "ts": round(s, 3), "dur": round(e - s, 3),
                      "pid": 1, "tid": 1} for s, e in spans]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps({"baseTimeNanoseconds": d.get("baseTimeNanoseconds"), "traceEvents": events}) + "\n")


def main(run: Path, out: Path) -> None:
    (metrics,) = run.glob("*/metrics.jsonl")
    (profile,) = [p for p in (run / "profile").iterdir() if p.is_dir()]
    lines = []
    for line in metrics.read_text().splitlines():
        rec = json.loads(line)
        rec["data"] = {k: v for k, v in rec["data"].items() if KEEP_METRICS.match(k)}
        lines.append(json.dumps(rec))
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for i, src in enumerate(sorted(profile.rglob("*.json*"))):
        rel = src.relative_to(profile)
        name = rel.name[:-3] if rel.name.endswith(".gz") else rel.name
        if rel.parent == Path("."):  # training traces: short names, the step and rank kept
            m = re.search(r"(actor-update|compute-log-prob)[^_]*_step(\d+)_rank(\d+)", name)
            name = f"actor-rollout_{m.group(1)}_step{m.group(2)}_rank{m.group(3)}_{i}.json" if m else name
        shrink_trace(src, out / "profile" / rel.parent / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
