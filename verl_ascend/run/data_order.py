"""The data a run was started on, pinned: a resume on changed training data is refused before Ray.

A checkpoint's ``data.pt`` holds the dataloader's position in *one* dataset and one shuffled order
(``data.seed``, ``data.shuffle``). Upstream applies it to whatever ``data.train_files`` holds at the
resume: replace the file between two starts and the old position walks through the new rows, the
same prompt trained twice, others never, without a word. So the run folder keeps
``data_order.json``: per *data era* (the steps trained on one set of files) the step it began
after, each training file's path, size and SHA-256, and the order's seed and shuffle flag.

- A fresh run (step 1) pins the files it starts on.
- A resume from the checkpoint of step S compares the files (and seed) of the era that checkpoint
  was trained in with the current ones; a difference is refused, naming the file with its recorded
  and current fingerprint, unless ``fault_tolerance.new_data_order=true``.
- With that key the run keeps the model, optimizer and step counter but starts a *fresh data
  order* on the new files (the order a new run on them would take): the trainer does not apply
  the checkpoint's dataloader position (``keep_fresh_order``). A new era beginning after S is
  recorded; a later resume from S itself (a crash before the next checkpoint) starts the fresh
  order again without asking, and resumes after S follow the new era's position as usual.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Optional

from verl_ascend.run.files import file_checksum, write_atomic
from verl_ascend.run.run_guard import StartRefused

DATA_ORDER_FILE = "data_order.json"
ENV_FRESH_DATA_ORDER = "VERL_ASCEND_FRESH_DATA_ORDER"
OVERRIDE_KEY = "fault_tolerance.new_data_order"


def _log(message: str) -> None:
    print(f"[verl-ascend] data: {message}", flush=True)


def train_files(config) -> list[str]:
    """``data.train_files`` as the trainer reads them (after the preflight's clean copies), absolute."""
    from omegaconf import ListConfig, OmegaConf

    raw = OmegaConf.select(config, "data.train_files", default=None)
    items = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, (list, tuple, ListConfig)) else []
    return [os.path.abspath(os.path.expanduser(str(p))) for p in items]


def fingerprint(path: str) -> dict:
    """Path, size and SHA-256 of one training file (streamed: constant memory)."""
    return {"path": path, "size": os.path.getsize(path), "sha256": file_checksum(path)}


def current_pin(config) -> dict:
    """What this start would train on: every training file's fingerprint and the order's seed."""
    from omegaconf import OmegaConf

    return {
        "files": [fingerprint(p) for p in train_files(config)],
        "seed": OmegaConf.select(config, "data.seed", default=None),
        "shuffle": bool(OmegaConf.select(config, "data.shuffle", default=True)),
    }


def read_eras(run_dir: str) -> list[dict]:
    """The recorded eras; [] when nothing was recorded. A record that exists but cannot be read as
    eras raises ValueError naming the file: the data check must not pass silently over it."""
    path = os.path.join(run_dir, DATA_ORDER_FILE)
    if not os.path.exists(path):
        return []
    try:
        with open(path, "rb") as f:
            eras = json.loads(f.read()).get("eras", [])
        if not isinstance(eras, list) or not all(
            isinstance(e, dict) and isinstance(e.get("after_step"), int) and isinstance(e.get("files", []), list)
            and all(isinstance(x, dict) and {"path", "size", "sha256"} <= x.keys() for x in e.get("files", []))
            for e in eras
        ):
            raise ValueError("'eras' is not a list of {after_step, files: [{path, size, sha256}]}")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(
            f"{path}: cannot read the recorded data order ({exc}); restore it, or delete it to pin the data "
            "from this start on (the check against the checkpoint's data is then skipped)"
        ) from None
    return eras


def era_of(eras: list[dict], step: int) -> Optional[dict]:
    """The era the checkpoint of ``step`` was trained in: the last one begun before it."""
    before = [e for e in eras if e["after_step"] < step]
    return before[-1] if before else (eras[0] if eras else None)


def differences(recorded: dict, current: dict) -> list[str]:
    """Human lines: which file or setting differs, recorded vs current."""
    found = []
    old = {f["path"]: f for f in recorded.get("files", [])}
    new = {f["path"]: f for f in current["files"]}
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if a is None:
            found.append(f"{path} was not a training file of that checkpoint (now {b['size']} bytes, sha256 {b['sha256'][:16]}…)")
        elif b is None:
            found.append(f"{path} (recorded {a['size']} bytes, sha256 {a['sha256'][:16]}…) is no longer in data.train_files")
        elif (a["size"], a["sha256"]) != (b["size"], b["sha256"]):
            found.append(
                f"{path} changed: recorded {a['size']} bytes, sha256 {a['sha256'][:16]}…; "
                f"now {b['size']} bytes, sha256 {b['sha256'][:16]}…"
            )
    for key in ("seed", "shuffle"):
        if recorded.get(key) != current[key]:
            found.append(f"data.{key} changed: recorded {recorded.get(key)!r}, now {current[key]!r}")
    return found


def plan_data_order(config, step: int, run_dir: str, allow_new: bool) -> dict:
    """Read-only, before Ray: how this start treats the data. Raises ``run_guard.StartRefused`` on changed data
    without ``fault_tolerance.new_data_order=true``. Returns what ``record_data_order`` writes."""
    current = current_pin(config)
    if step == 0:
        return {"eras": [{"after_step": 0, **current}], "fresh_order": False, "note": "pinned for a new run"}
    try:
        eras = read_eras(run_dir)
    except ValueError as exc:
        raise StartRefused(str(exc)) from None
    era = era_of(eras, step)
    if era is None:  # a run from before pinning: nothing to compare with, pin from here on
        return {"eras": [{"after_step": 0, "unverified": True, **current}], "fresh_order": False,
                "note": f"no data recorded for the checkpoint of step {step}; pinned from here on"}
    kept = [e for e in eras if e["after_step"] < step]  # later eras describe steps trained again now
    changed = differences(era, current)
    if not changed:
        return {"eras": kept, "fresh_order": False, "note": f"same data as the checkpoint of step {step}"}
    begun_here = [e for e in eras if e["after_step"] == step]
    if begun_here and not differences(begun_here[-1], current):
        return {"eras": kept + begun_here[-1:], "fresh_order": True,
                "note": f"fresh data order after step {step} (chosen at an earlier start)"}
    if not allow_new:
        raise StartRefused(
            f"data.train_files: the data changed since the checkpoint of step {step} was trained "
            f"({os.path.join(run_dir, DATA_ORDER_FILE)}): " + "; ".join(changed) + ". Resuming would apply that "
            "checkpoint's dataloader position to other rows (prompts trained twice or never). Accepted: the "
            f"recorded files back in place, or {OVERRIDE_KEY}=true to keep the model and step counter and start a "
            "fresh data order on the new files (recorded in the run folder)"
        )
    new_era = {"after_step": step, **current, "replaces": changed}
    return {"eras": kept + [new_era], "fresh_order": True, "note": f"{OVERRIDE_KEY}=true: fresh data order after step {step}"}


def record_data_order(run_dir: str, decision: dict) -> None:
    """Write the eras (atomically) once the start is committed, and say what was decided. Eras this
    start drops (steps trained again, a start over) move to ``superseded``: nothing recorded is lost."""
    path = os.path.join(run_dir, DATA_ORDER_FILE)
    try:
        with open(path, "rb") as f:
            before = json.loads(f.read())
    except (OSError, ValueError):
        before = {}
    superseded = list(before.get("superseded", [])) if isinstance(before, dict) else []
    try:
        old = read_eras(run_dir)
    except ValueError:  # a fresh start over an unreadable record (a resume is refused before this)
        old = []
    superseded += [e for e in old if e not in decision["eras"]]
    record = {"time": time.time(), "eras": decision["eras"], "superseded": superseded}
    write_atomic(path, json.dumps(record, indent=1).encode())
    _log(decision["note"])


def keep_fresh_order(loader: Any, load_checkpoint: Callable[[], Any]) -> Any:
    """Run upstream's checkpoint load, then put ``loader`` back where a new run on this data starts.

    The model, optimizer and step counter come from the checkpoint; the dataloader position and
    the shuffling generator are those the loader had before the load (freshly built: nothing
    consumed, generator seeded with ``data.seed``)."""
    sampler = getattr(loader, "sampler", None)
    generator = getattr(sampler, "generator", None)
    generator_state = generator.get_state() if generator is not None else None
    fresh = loader.state_dict()
    result = load_checkpoint()
    loader.load_state_dict(fresh)
    if generator_state is not None:
        generator.set_state(generator_state)
    _log("the checkpoint's dataloader position is not applied: fresh data order on the new files")
    return result
