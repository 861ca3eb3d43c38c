"""One progress line per training step, printed by the driver.

Upstream's metrics are logged inside the TaskRunner actor. Its ``file`` logger appends one
JSON line ``{"step": n, "data": {...}}`` per step to ``$VERL_FILE_LOGGER_PATH``; this module
follows that file from a daemon thread in the driver and prints a compact line per step:
step, reward, accuracy, response length, groups kept by dynamic sampling, and throughput.
"""

from __future__ import annotations

import json
import os
import threading
import time


def format_step(record: dict, total_steps: int | None = None) -> str:
    step, m = record.get("step"), record.get("data", {})

    def get(*keys, default=float("nan")):
        for k in keys:
            if k in m:
                return m[k]
        return default

    total = f"/{total_steps}" if total_steps else ""
    parts = [
        f"step {step}{total}",
        f"score {get('critic/score/mean'):.3f}",
        f"acc {get('reward_extra/acc/mean'):.3f}",
    ]
    if "reward_extra/acc/sampled_mean" in m:  # filtered groups included (recipe trainer)
        parts.append(f"sampled acc {m['reward_extra/acc/sampled_mean']:.3f}")
    parts.append(f"resp_len {get('response_length/mean'):.1f}")
    if "reward_extra/overlong/mean" in m:
        parts.append(f"overlong {m['reward_extra/overlong/mean']:.2f}")
    if "training/filter_groups/evicted_samples" in m:
        parts.append(f"filtered {m['training/filter_groups/evicted_samples']:.0f}")
    if "rollout_tail/tail_fraction" in m:
        parts.append(f"tail {m['rollout_tail/tail_fraction']:.2f}")
    if m.get("rollout_tail/aborted_requests") or m.get("rollout_tail/carried_tokens"):
        parts.append(
            f"cut {m.get('rollout_tail/aborted_requests', 0):.0f} req, carried {m.get('rollout_tail/carried_tokens', 0):.0f} tok"
        )
    if "training/off_policy/trajectory_staleness/mean" in m:  # upstream's V1 trainer (0 in sync): weight versions behind
        parts.append(f"stale {m['training/off_policy/trajectory_staleness/mean']:.2f}"
                     f" (max {get('training/off_policy/trajectory_staleness/max'):.0f})")
        if "timing_s/update_weights" in m:
            parts.append(f"weight sync {m['timing_s/update_weights']:.2f}s")
    gen = get("timing_s/gen")
    step_s = get("timing_s/step")
    tokens = get("perf/total_num_tokens")
    if step_s == step_s and step_s > 0:
        parts.append(f"step {step_s:.1f}s (gen {gen:.1f}s)")
    if tokens == tokens and step_s == step_s and step_s > 0:
        parts.append(f"{tokens / step_s:.0f} tok/s")
    return " | ".join(parts)


class ProgressPrinter:
    """Tail ``path`` and print a line per new metrics record until ``stop()``."""

    def __init__(self, path: str, total_steps: int | None = None, interval_s: float = 0.5):
        self.path = path
        self.total_steps = total_steps
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verl-ascend-progress", daemon=True)
        self._offset = 0
        self._lock = threading.Lock()

    def start(self) -> "ProgressPrinter":
        # Only records appended from now on belong to this run.
        self._offset = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._poll()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            time.sleep(self.interval_s)

    def _poll(self) -> None:
        with self._lock:
            self._poll_locked()

    def _poll_locked(self) -> None:
        if not os.path.exists(self.path):
            return
        if os.path.getsize(self.path) < self._offset:  # file was truncated by a fresh run
            self._offset = 0
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "critic/score/mean" in record.get("data", {}):
                print(f"[verl-ascend] {format_step(record, self.total_steps)}", flush=True)


def start_printer(loggers, default_path: str, total_steps) -> "ProgressPrinter | None":
    """With upstream's ``file`` logger among ``loggers``: the metrics file's path said once and a
    progress line per step from it (``$VERL_FILE_LOGGER_PATH``, else ``default_path``); else None."""
    if "file" not in loggers:
        return None
    path = os.environ.setdefault("VERL_FILE_LOGGER_PATH", default_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    print(f"[verl-ascend] metrics: {path}", flush=True)
    return ProgressPrinter(path, total_steps=total_steps).start()
