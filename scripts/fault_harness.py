#!/usr/bin/env python
"""Fault harness: inject each fault into a real tiny run of the DAPO recipe and check what must hold after it.

    python scripts/fault_harness.py --list
    python scripts/fault_harness.py [--only NAME[,NAME...]] [--out DIR] [--result FILE] [--tiny-dir DIR]

Each fault gets its own output folder and drives ``python -m verl_ascend train`` (the tiny CPU
config, 3 steps, a checkpoint every step) in its own session (``tests/recipe/fault_helpers.py``), injects
the fault, restarts the way a user would, and then checks the invariants of issue 25 on what the runs left:

- ``metrics_once``: every training step has exactly one row in ``metrics.jsonl`` (across the run and its
  resumes), and a run that finished holds steps 1..N;
- ``prompts_once``: no prompt of the dataset is trained twice within one data era (``prompts.jsonl``
  against the eras of ``data_order.json``);
- ``resumed_only_marked``: every start that resumed (``resume.jsonl``) resumed a checkpoint that carries
  its completion marker, and no unmarked ``global_step_N`` folder is left to be resumed;
- ``no_orphans``: 30 s after each start ended, no process of its session (the driver, Ray's GCS, raylet,
  workers, vLLM) is alive -- found by session id, never by name;
- ``last_line``: the last line of each start that ended on its own names what happened and how to go on.

Progress is printed per fault, then a summary table; the full record (every start's exit status, last
line and log path, every check with its detail, seconds per fault) goes to a JSON file. Exit status 0
when every fault that ran passed; a fault that cannot be injected on this machine (no tmpfs mount, no
vLLM) is ``skipped`` with its reason. A new fault is one entry: an ``inject`` function. Heavy: run it alone (``flock /tmp/verl-heavy.lock``
on a shared machine); a fault takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.recipe.fault_helpers import (  # noqa: E402
    SMALL_STEPS, RecipeRun, alive, fill, last_line, lock_free, process_titled, read_json, read_jsonl, recipe_env,
    session_processes, size_limited_tmpfs, snapshot, train_steps, vllm_env,
)

STEPS = 3
OVERRIDES = [f"trainer.total_training_steps={STEPS}", *SMALL_STEPS]
START_TIMEOUT = 900  # Ray's start-up and a step on a loaded 2-core machine
ORPHAN_GRACE_S = 30
EXPERIMENT = "dapo_tiny_cpu"
MARKER = "verl_ascend_complete.json"


# ------------------------------------------------------------------------------------------- one fault's lab
@dataclass
class Start:
    """One start of the recipe within a fault: how it ended and what it left alive."""

    name: str
    log: str
    rc: Optional[int] = None
    killed: bool = False  # ended by the harness (kill -9 of its tree): it could print nothing
    last_line: str = ""
    survivors: list[str] = field(default_factory=list)  # processes of its session alive 30 s after it ended
    expect: list[str] = field(default_factory=list)  # what its last line must name


class Lab:
    """The output folder of one fault, and the starts made in it."""

    def __init__(self, root: Path, tiny_dir: Path):
        self.out = root
        self.run_dir = root / EXPERIMENT
        self.ckpt = root / "checkpoints" / EXPERIMENT
        self.tiny_dir = tiny_dir
        self.env = recipe_env(tiny_dir, root)
        self.starts: list[Start] = []
        self.finished = False  # the last start trained to the last step
        self.facts: dict = {}  # what the fault observed, for the record
        self.cleanup = contextlib.ExitStack()  # closed after the invariants (a mount they still read)

    def launch(self, name: str, *extra: str, overrides=None) -> RecipeRun:
        return RecipeRun([*(overrides or OVERRIDES), *extra], self.env, self.out / f"{name}.log")

    def status(self) -> dict:
        return read_json(self.run_dir / "status.json") or {}

    def at(self, run: RecipeRun, step: int, phase: str, timeout: float = START_TIMEOUT):
        return run.wait_for(lambda: (s := self.status()).get("step") == step and s.get("phase") == phase, timeout,
                            poll_s=0.01)

    def finish(self, run: RecipeRun, name: str, expect=(), timeout: float = START_TIMEOUT) -> Start:
        """Wait for the start to end by itself; then watch its session for ``ORPHAN_GRACE_S``."""
        try:
            rc = run.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        return self._record(run, name, rc, killed=False, expect=expect)

    def kill9(self, run: RecipeRun, name: str) -> Start:
        """SIGKILL every process of the start's session at once (a machine losing power)."""
        run.kill_tree()
        return self._record(run, name, run.proc.returncode, killed=True)

    def _record(self, run: RecipeRun, name: str, rc, killed: bool, expect=()) -> Start:
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while (left := alive(run.sid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        survivors = []
        for proc in left:
            try:
                survivors.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
            except Exception:  # noqa: BLE001 -- gone meanwhile
                continue
        run.kill_tree()  # clean up whatever survived (counted above)
        start = Start(name, str(run.log_path), rc, killed, last_line(run.output()), survivors, list(expect))
        self.starts.append(start)
        return start


# ------------------------------------------------------------------------------------------------ invariants
@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def check_metrics_once(lab: Lab) -> Check:
    steps = train_steps(lab.run_dir)
    twice = sorted({s for s in steps if steps.count(s) > 1})
    if twice:
        return Check("metrics_once", False, f"steps with more than one metrics row: {twice} (rows: {steps})")
    if lab.finished and steps != list(range(1, STEPS + 1)):
        return Check("metrics_once", False, f"the run finished but metrics.jsonl holds steps {steps}, not 1..{STEPS}")
    return Check("metrics_once", True, f"steps {steps}, one row each")


def check_prompts_once(lab: Lab) -> Check:
    eras = (read_json(lab.run_dir / "data_order.json") or {}).get("eras", [])
    starts = sorted(int(e.get("after_step", 0)) for e in eras) or [0]
    seen: dict[tuple[int, int], int] = {}
    twice = []
    for record in read_jsonl(lab.run_dir / "prompts.jsonl"):
        era = max([s for s in starts if s < record["step"]], default=starts[0])  # an era covers the steps after it
        for index in record.get("index", []):
            if (era, index) in seen:
                twice.append(f"prompt {index}: step {seen[(era, index)]} and step {record['step']}")
            seen.setdefault((era, index), record["step"])
    if twice:
        return Check("prompts_once", False, "; ".join(twice[:10]))
    return Check("prompts_once", True, f"{len(seen)} prompts, each once per data era (eras after steps {starts})")


def check_resumed_only_marked(lab: Lab) -> Check:
    problems = []
    for record in read_jsonl(lab.run_dir / "resume.jsonl"):
        step = int(record.get("resume_step", 0))
        if step and not (lab.ckpt / f"global_step_{step}" / MARKER).exists():
            problems.append(f"a start resumed global_step_{step}, which carries no {MARKER}")
    if lab.finished:  # anything unproven would have been quarantined by the last start or is its own
        unmarked = sorted(p.name for p in lab.ckpt.glob("global_step_*") if p.is_dir()
                          and not p.name.endswith(".incomplete") and not (p / MARKER).exists())
        problems += [f"{name} is left without its marker" for name in unmarked]
    resumed = [int(r.get("resume_step", 0)) for r in read_jsonl(lab.run_dir / "resume.jsonl")]
    return Check("resumed_only_marked", not problems, "; ".join(problems) or f"starts resumed after steps {resumed}")


def check_no_orphans(lab: Lab) -> Check:
    left = [f"{s.name}: {p}" for s in lab.starts for p in s.survivors]
    return Check("no_orphans", not left, "; ".join(left) or
                 f"no process of {len(lab.starts)} start(s) alive {ORPHAN_GRACE_S} s after it ended")


def check_last_line(lab: Lab) -> Check:
    bad = []
    for start in lab.starts:
        missing = [needle for needle in start.expect if not re.search(needle, start.last_line)]
        if missing or "Traceback" in start.last_line:
            bad.append(f"{start.name}: last line {start.last_line[:300]!r} lacks {missing}")
    return Check("last_line", not bad, "; ".join(bad) or "every start ended on a line naming what happened")


INVARIANTS = (check_metrics_once, check_prompts_once, check_resumed_only_marked, check_no_orphans, check_last_line)


def check_exit(start: Start, code: Optional[int]) -> Check:
    return Check(f"exit_{start.name}", start.rc == code, f"{start.name} exited {start.rc} (expected {code})")


# --------------------------------------------------------------------------------------------------- faults
RERUN = r"run the same command again"


def kill9_tree(lab: Lab) -> list[Check]:
    """kill -9 of the whole process tree while step 2 generates; the same command resumes after step 1."""
    run = lab.launch("killed")
    try:
        lab.at(run, 2, "rollout")
    finally:
        killed = lab.kill9(run, "killed")
    final = lab.finish(lab.launch("resumed"), "resumed")
    lab.finished = final.rc == 0
    resumed = [r.get("resume_step") for r in read_jsonl(lab.run_dir / "resume.jsonl")]
    return [check_exit(final, 0),
            Check("resumed_after_step_1", resumed == [0, 1], f"resume steps per start: {resumed} (killed at {killed.name})")]


def _chattr(path: Path, flag: str) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


def metrics_unwritable(lab: Lab) -> list[Check]:
    """The metrics file made unwritable (immutable) while step 2 saves its checkpoint: the run stops naming
    the file and the errno; the checkpoint of the step whose metrics were lost carries no marker, so the
    rerun quarantines it and trains that step again."""
    metrics = lab.run_dir / "metrics.jsonl"
    run = lab.launch("unwritable")
    try:
        lab.at(run, 2, "save_checkpoint")
        if not _chattr(metrics, "+i"):  # root ignores permission bits; an immutable inode refuses its open fd too
            run.kill_tree()
            raise Skip("chattr +i is not supported on this file system")
        stopped = lab.finish(run, "unwritable", expect=[r"cannot write .*metrics\.jsonl: errno 1 \(EPERM", RERUN])
    finally:
        _chattr(metrics, "-i")
        if run.alive():
            run.kill_tree()
    final = lab.finish(lab.launch("rerun"), "rerun")
    lab.finished = final.rc == 0
    quarantined = sorted(p.name for p in lab.ckpt.glob("*.incomplete"))
    return [check_exit(stopped, 1), check_exit(final, 0),
            Check("unmarked_quarantined", bool(quarantined), f"quarantined by the rerun: {quarantined}")]


def marker_deleted(lab: Lab) -> list[Check]:
    """A finished run's last checkpoint loses its completion marker; a longer rerun must not resume it."""
    first = lab.finish(lab.launch("first", overrides=[*OVERRIDES, "trainer.total_training_steps=2"]), "first")
    (lab.ckpt / "global_step_2" / MARKER).unlink()
    final = lab.finish(lab.launch("rerun"), "rerun")
    lab.finished = final.rc == 0
    log = Path(final.log).read_text(errors="replace")
    said = "global_step_2 is not proven whole" in log and "quarantined as global_step_2.incomplete" in log
    return [check_exit(first, 0), check_exit(final, 0),
            Check("quarantine_said", said and (lab.ckpt / "global_step_2.incomplete").is_dir(),
                  "the rerun printed the quarantine of global_step_2 and kept it as global_step_2.incomplete")]


def _two_steps(lab: Lab) -> Start:
    return lab.finish(lab.launch("first", overrides=[*OVERRIDES, "trainer.total_training_steps=2"]), "first")


def _resumed_after(lab: Lab, step: int) -> Check:
    resumed = [r.get("resume_step") for r in read_jsonl(lab.run_dir / "resume.jsonl")]
    return Check(f"resumed_after_step_{step}", resumed[-1:] == [step], f"resume steps per start: {resumed}")


def _mode_changed(written: str, other: str) -> Callable[[Lab], list[Check]]:
    """A finished 2-step run in ``written`` started again in ``other``: refused before Ray naming both modes and
    what upstream keeps differently, nothing on disk changed; ``written`` then resumes after step 2."""
    def inject(lab: Lab) -> list[Check]:
        mode = lambda m: f"trainer.v1.trainer_mode={m}"  # noqa: E731
        first = lab.finish(lab.launch("first", mode(written), overrides=[*OVERRIDES, "trainer.total_training_steps=2"]),
                           "first")
        before = snapshot(lab.run_dir, lab.ckpt)
        refused = lab.finish(lab.launch("other_mode", mode(other)), "other_mode", expect=[
            rf"trainer\.v1\.trainer_mode={other}, but the checkpoint", rf"was written in {written}", r"transfer_queue/",
            rf"trainer\.v1\.trainer_mode={written} to resume it", r"fault_tolerance\.start_over=true"], timeout=300)
        changed = sorted(set(snapshot(lab.run_dir, lab.ckpt).items()) ^ set(before.items()))
        final = lab.finish(lab.launch("same_mode", mode(written)), "same_mode")
        lab.finished = final.rc == 0
        return [check_exit(first, 0), check_exit(refused, 2), check_exit(final, 0),
                Check("nothing_changed_by_the_refusal", not changed, f"changed by the refused start: {changed[:5]}"),
                _resumed_after(lab, 2)]
    return inject


def tracker_behind(lab: Lab) -> list[Check]:
    """The tracker names step 1, whose marker is gone, while global_step_2 is complete: refused naming the
    complete checkpoint and the tracker fix first; with the tracker fixed (2) the rerun resumes after step 2."""
    first = _two_steps(lab)
    (lab.ckpt / "global_step_1" / MARKER).unlink()
    tracker = lab.ckpt / "latest_checkpointed_iteration.txt"
    tracker.write_text("1")
    refused = lab.finish(lab.launch("behind"), "behind", timeout=300, expect=[
        r"reads 1, but global_step_1 is no complete checkpoint", r"trainer\.default_local_dir: global_step_2;",
        re.escape(f"`echo 2 > {tracker}` resumes after step 2"), r"fault_tolerance\.start_over=true trains from step 1"])
    tracker.write_text("2")  # the fix offered first
    final = lab.finish(lab.launch("fixed"), "fixed")
    lab.finished = final.rc == 0
    return [check_exit(first, 0), check_exit(refused, 2), check_exit(final, 0), _resumed_after(lab, 2)]


# Values upstream rejects only inside Ray (issue 39): each refused before it, its key named. One start gives them
# all at once (a refusal names every culprit); the vLLM argument needs rollout.name=vllm, a second start.
BAD_VALUES = {
    "trainer.v1.sampler.max_off_policy_threshold=-1": "max_off_policy_threshold=-1",
    "trainer.v1.sampler.max_off_policy_strategy=bogus": "max_off_policy_strategy='bogus'",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=hccl": "checkpoint_engine.backend='hccl'",
    "+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.gloo.timeout_s=-1": "gloo.timeout_s=-1",
    "actor_rollout_ref.rollout.n=1": "rollout.n=1",
}
BAD_VLLM_VALUE = ("actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_batched_tokens=abc")


def bad_values(lab: Lab) -> list[Check]:
    """Every value above in one start, then the vLLM argument: each start exits 2 before Ray naming every key,
    and neither creates the run folder."""
    starts = [lab.finish(lab.launch("bad_values", *BAD_VALUES), "bad_values", timeout=300),
              lab.finish(lab.launch("bad_vllm_value", *BAD_VLLM_VALUE), "bad_vllm_value", timeout=300)]
    needles = [list(BAD_VALUES.values()), ["max_num_batched_tokens"]]
    checks = [check_exit(start, 2) for start in starts]
    for start, wanted in zip(starts, needles):
        text = Path(start.log).read_text(errors="replace")
        missing = [n for n in wanted if n not in text]
        checks.append(Check(f"named_{start.name}", not missing and "Traceback" not in text,
                            f"{start.name}: not named {missing}" if missing else f"{start.name}: every key named"))
    checks.append(Check("nothing_created", not lab.run_dir.exists(), f"run folder {lab.run_dir} exists: "
                        f"{lab.run_dir.exists()}"))
    return checks


def marker_checksum(lab: Lab) -> list[Check]:
    """A finished run's last marker gets a wrong (well-formed) checksum for a shard it lists: the rerun blames
    the marker, not the shard ("same size, different content"), quarantines the folder, resumes after step 1."""
    first = _two_steps(lab)
    path = lab.ckpt / "global_step_2" / MARKER
    marker = json.loads(path.read_text())
    shard = next(name for name in sorted(marker["checksums"]) if name != "data.pt")
    marker["checksums"][shard] = "0" * 64
    path.write_text(json.dumps(marker))
    final = lab.finish(lab.launch("rerun"), "rerun")
    lab.finished = final.rc == 0
    log = Path(final.log).read_text(errors="replace")
    blamed = f"{MARKER} itself was changed after it was written" in log and "different content" not in log
    return [check_exit(first, 0), check_exit(final, 0),
            Check("marker_blamed", blamed and (lab.ckpt / "global_step_2.incomplete").is_dir(),
                  "the rerun blamed global_step_2's marker, not its shard, and quarantined the folder"),
            _resumed_after(lab, 1)]


def _reverse_rows(path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(table.take(list(range(table.num_rows - 1, -1, -1))), path)


def data_replaced(lab: Lab) -> list[Check]:
    """The training file is replaced (rows reversed) between resumes: refused before Ray naming the file;
    ``fault_tolerance.new_data_order=true`` then continues with a fresh data order, recorded."""
    data = lab.out / "data" / "train.parquet"
    data.parent.mkdir(parents=True)
    shutil.copy(lab.tiny_dir / "data" / "train.parquet", data)
    own = [*OVERRIDES, f"data.train_files={data}"]
    first = lab.finish(lab.launch("first", "trainer.total_training_steps=2", overrides=own), "first")
    _reverse_rows(data)
    refused = lab.finish(lab.launch("changed", overrides=own), "changed", expect=[
        r"data\.train_files: the data changed since the checkpoint of step 2", re.escape(str(data)),
        r"fault_tolerance\.new_data_order=true"])
    final = lab.finish(lab.launch("new_order", "fault_tolerance.new_data_order=true", overrides=own), "new_order")
    lab.finished = final.rc == 0
    eras = [e.get("after_step") for e in (read_json(lab.run_dir / "data_order.json") or {}).get("eras", [])]
    return [check_exit(first, 0), check_exit(refused, 2), check_exit(final, 0),
            Check("new_era_recorded", eras == [0, 2], f"data eras begin after steps {eras}")]


def second_run(lab: Lab) -> list[Check]:
    """A second run on the same folders while the first trains: refused at once naming the first."""
    first = lab.launch("first")
    try:
        first.wait_for(lambda: (lab.run_dir / "owner.json").exists(), START_TIMEOUT)
        pid = first.proc.pid
        second = lab.finish(lab.launch("second"), "second", expect=[r"another run is using", f"PID {pid}"], timeout=300)
        first_alive = first.alive()
    finally:
        done = lab.finish(first, "first")
    lab.finished = done.rc == 0
    return [check_exit(second, 2), check_exit(done, 0),
            Check("first_kept_running", first_alive, "the first run was still training when the second was refused")]

KEPT = re.compile(r"Kept: \S+/global_step_(\d+) \(step \d+, the last complete checkpoint\)")
CLEAN_TAIL = ("Traceback", "Aborted", "core dumped")


def _step_marked(lab: Lab, step: int):
    return lambda: (lab.ckpt / f"global_step_{step}" / MARKER).exists()


def _resumes(lab: Lab, start: Start, kept: int, name: str = "resumed", *extra: str) -> list[Check]:
    """The same command again (``extra``: the start's own overrides): it resumes after the ``kept`` step and finishes."""
    final = lab.finish(lab.launch(name, *extra), name)
    lab.finished = final.rc == 0
    resumed = [r.get("resume_step") for r in read_jsonl(lab.run_dir / "resume.jsonl")]
    return [check_exit(final, 0), Check(f"resumed_after_step_{kept}", resumed[-1:] == [kept] and kept >= 1,
                                        f"resume steps per start: {resumed} ({start.name} kept step {kept})")]


def _kept_step(start: Start) -> int:
    found = KEPT.search(start.last_line)
    return int(found.group(1)) if found else 0


def driver_kill9(lab: Lab) -> list[Check]:
    """kill -9 of the driver alone once step 1 is kept: its guardian takes the whole run down, the lock is
    free only then, nothing is written after, and the same command resumes after the kept step."""
    run = lab.launch("killed")
    try:
        run.wait_for(_step_marked(lab, 1), START_TIMEOUT)
        os.kill(run.proc.pid, signal.SIGKILL)  # the driver only, not its tree
        since = time.monotonic()
        killed = lab.finish(run, "killed", expect=[r"the driver \(PID \d+\) .*ended without stopping its run",
                                                   KEPT.pattern, RERUN + r": .*-m verl_ascend train"])
    finally:
        if run.alive():
            run.kill_tree()
    gone_s = round(time.monotonic() - since, 1)  # the driver's death until its session was empty
    free = [lock_free(lab.run_dir), lock_free(lab.ckpt)]
    before = snapshot(lab.run_dir, lab.ckpt)
    time.sleep(3)
    changed = sorted(set(snapshot(lab.run_dir, lab.ckpt).items()) ^ set(before.items()))
    lab.facts["gone_after_s"] = gone_s
    return [Check("lock_takeable", free == [True, True], f"run and checkpoint folder locks free after death: {free}"),
            Check("nothing_written_after", not changed, f"changed after death: {changed[:5]}"),
            *_resumes(lab, killed, _kept_step(killed))]


def _driver_signal(sig: signal.Signals):
    def inject(lab: Lab) -> list[Check]:
        run = lab.launch("stopped")
        try:
            run.wait_for(_step_marked(lab, 1), START_TIMEOUT)
            os.kill(run.proc.pid, sig)
            stopped = lab.finish(run, "stopped", expect=[
                rf"^\[verl-ascend\] stopped by {sig.name}: the run stopped at once", KEPT.pattern,
                RERUN + r": .*-m verl_ascend train"], timeout=300)
        finally:
            if run.alive():
                run.kill_tree()
        tail = Path(stopped.log).read_text(errors="replace")[-4000:]
        dirty = [bad for bad in CLEAN_TAIL if bad in tail]
        return [check_exit(stopped, 128 + int(sig)),
                Check("clean_tail", not dirty, f"the log's last 4000 characters hold {dirty or 'none of'} {list(CLEAN_TAIL)}"),
                *_resumes(lab, stopped, _kept_step(stopped))]

    inject.__doc__ = f"{sig.name} to the driver once step 1 is kept: exit {128 + int(sig)}, what was kept, how to resume."
    return inject


def disk_full(lab: Lab) -> list[Check]:
    """The checkpoint folder is a 256 MiB tmpfs, filled once step 1 is kept: step 2's save fails with a
    last line saying "no space left on device"; freed, the same command quarantines global_step_2, resumes."""
    cannot = lab.cleanup.enter_context(size_limited_tmpfs(lab.ckpt))
    if cannot:
        raise Skip(cannot)
    own = [*OVERRIDES, f"trainer.default_local_dir={lab.ckpt}"]
    run = lab.launch("full", overrides=own)
    try:
        run.wait_for(_step_marked(lab, 1), START_TIMEOUT)
        filler = fill(lab.ckpt)
        full = lab.finish(run, "full", expect=[
            rf"^\[verl-ascend\] error: no space left on device in {re.escape(str(lab.ckpt))}/global_step_2",
            r"Kept: .*global_step_1 \(step 1, the last complete checkpoint\)", RERUN])
    finally:
        if run.alive():
            run.kill_tree()
    filler.unlink()  # the user frees the disk
    final = lab.finish(lab.launch("freed", overrides=own), "freed")
    lab.finished = final.rc == 0
    resumed = [r.get("resume_step") for r in read_jsonl(lab.run_dir / "resume.jsonl")]
    return [check_exit(full, 1), check_exit(final, 0),
            Check("half_written_quarantined", (lab.ckpt / "global_step_2.incomplete").is_dir(),
                  f"quarantined: {sorted(p.name for p in lab.ckpt.glob('*.incomplete'))}"),
            Check("resumed_after_step_1", resumed == [0, 1], f"resume steps per start: {resumed}")]


def engine_core_kill(lab: Lab) -> list[Check]:
    """kill -9 of vLLM's engine-core process while its server actor lives: the watchdog names the replica
    and the engine process."""
    if importlib.util.find_spec("vllm") is None:
        raise Skip("vLLM is not importable here (make vllm installs its CPU build)")
    lab.env = vllm_env(lab.env)
    run = lab.launch("engine_killed", "actor_rollout_ref.rollout.name=vllm", "fault_tolerance.rollout_timeout_s=300")
    try:
        run.wait_for(lambda: lab.status().get("phase") == "rollout", START_TIMEOUT + 600)
        engine = process_titled(run, "VLLM::EngineCore")
        if engine is None:
            raise RuntimeError("no VLLM::EngineCore process in the run's session")
        pid, server = engine.pid, engine.parent().pid
        engine.send_signal(signal.SIGKILL)
        stopped = lab.finish(run, "engine_killed", timeout=300, expect=[
            r"rollout server died during generation: replica 0",
            re.escape(f"engine process EngineCore (pid {pid}) was killed by SIGKILL; the server actor (pid {server})"),
            RERUN])
    finally:
        if run.alive():
            run.kill_tree()
    return [check_exit(stopped, 1)]


def worker_oom(lab: Lab) -> list[Check]:
    """SIGKILL of the training worker while step 2 updates the actor (what the kernel's OOM killer does):
    the last line names the Ray actor and its pid; the same command resumes after step 1."""
    run = lab.launch("worker_killed")
    try:
        lab.at(run, 2, "update_actor")
        worker = process_titled(run, "ray::WorkerDict")
        if worker is None:
            raise RuntimeError("no ray::WorkerDict process in the run's session")
        pid = worker.pid
        worker.send_signal(signal.SIGKILL)
        stopped = lab.finish(run, "worker_killed", timeout=300, expect=[
            r"^\[verl-ascend\] error: Ray actor WorkerDict \(name ", rf"WorkerDict_0:0, pid {pid}, node ",
            r"Kept: .*global_step_1 \(step 1, the last complete checkpoint\)", RERUN])
    finally:
        if run.alive():
            run.kill_tree()
    return [check_exit(stopped, 1), *_resumes(lab, stopped, 1)]


def standalone_server_kill(lab: Lab) -> list[Check]:
    """kill -9 of the standalone rollout pool's server in separate_async while step 2 generates: the last
    line names the dead server and the same command resumes after step 1; upstream's agent-loop tracebacks about it stay off the console, kept in
    the run folder (seam row agent_loop_dead_actor_log), and the line above the last one says where."""
    mode = ("trainer.v1.trainer_mode=separate_async", "fault_tolerance.rollout_timeout_s=120")
    run = lab.launch("server_killed", *mode)
    try:
        lab.at(run, 2, "rollout")
        servers = [p for p in session_processes(run.sid) if _title(p).startswith("ray::HFRolloutServer")]
        if len(servers) < 2:
            raise RuntimeError(f"expected the trainer pool's and the standalone pool's servers, found {len(servers)}")
        max(servers, key=lambda p: p.create_time()).kill()  # the standalone pool starts after the trainer pool
        stopped = lab.finish(run, "server_killed", timeout=300, expect=[
            r"rollout server died during generation: replica 1", r"Kept: .*global_step_1 ", RERUN])
    finally:
        if run.alive():
            run.kill_tree()
    console = Path(stopped.log).read_text(errors="replace")
    kept = lab.run_dir / "worker_errors.log"
    lines = [line for line in console.splitlines() if line.strip()]
    quiet = "ActorDiedError" not in console and "Traceback" not in console
    named = kept.exists() and len(lines) > 1 and f"kept in {kept}" in lines[-2]
    return [check_exit(stopped, 1), *_resumes(lab, stopped, 1, "resumed", *mode),
            Check("tracebacks_kept_off_console", quiet and named,
                  f"console tracebacks: {console.count('Traceback')}; kept file: {kept.exists()}; "
                  f"line above the last: {lines[-2][:160] if len(lines) > 1 else ''}")]


def _title(proc) -> str:
    import psutil

    try:
        return (proc.cmdline() or [""])[0]
    except psutil.Error:
        return ""


class Skip(Exception):
    """The fault cannot be injected on this machine (the reason is recorded)."""


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    inject: Callable[[Lab], list[Check]]


FAULTS = (
    Fault("kill9_tree", "kill -9 of the whole process tree mid-run, then the same command", kill9_tree),
    Fault("metrics_unwritable", "metrics.jsonl made unwritable mid-run (chattr +i), then fixed and rerun",
          metrics_unwritable),
    Fault("marker_deleted", "a checkpoint's completion marker deleted, then a longer rerun", marker_deleted),
    Fault("data_replaced", "training data replaced between resumes; refused, then new_data_order=true", data_replaced),
    Fault("second_run", "a second run on the same folders while the first runs", second_run),
    Fault("driver_kill9", "kill -9 of the driver alone: its cluster must stop, the lock held until it has", driver_kill9),
    Fault("driver_sigterm", "SIGTERM to the driver: clean stop, non-zero exit, how to resume",
          _driver_signal(signal.SIGTERM)),
    Fault("driver_sigint", "SIGINT (Ctrl-C) to the driver: clean stop, non-zero exit, how to resume",
          _driver_signal(signal.SIGINT)),
    Fault("disk_full", "no space left during a checkpoint save (a 256 MiB tmpfs as the checkpoint folder)", disk_full),
    Fault("engine_core_kill", "kill -9 of the vLLM engine-core process behind a live server (rollout.name=vllm)",
          engine_core_kill),
    Fault("standalone_server_kill", "kill -9 of separate_async's standalone rollout server mid-step: one clean "
          "line, upstream's tracebacks kept in the run folder", standalone_server_kill),
    Fault("worker_oom", "a training worker SIGKILLed (what the OOM killer does) mid-update", worker_oom),
    Fault("mode_changed", "a sync run started again in separate_async: refused before Ray, then the same mode",
          _mode_changed("sync", "separate_async")),
    Fault("mode_changed_back", "a separate_async run started again in sync: refused before Ray, then the same mode",
          _mode_changed("separate_async", "sync")),
    Fault("tracker_behind", "the tracker names an incomplete step below a complete checkpoint; refused, then fixed",
          tracker_behind),
    Fault("bad_values", "values upstream rejects inside Ray (sampler, weight-sync engine, vLLM argument, n=1): "
          "refused before it", bad_values),
    Fault("marker_checksum", "a wrong checksum in a completion marker: the marker is blamed, not the shard",
          marker_checksum),
)
BY_NAME = {f.name: f for f in FAULTS}


# ---------------------------------------------------------------------------------------------------- runner
def run_fault(fault: Fault, root: Path, tiny_dir: Path) -> dict:
    record = {"name": fault.name, "what": fault.what, "status": "", "seconds": 0.0, "starts": [], "checks": []}
    lab_dir = root / fault.name
    shutil.rmtree(lab_dir, ignore_errors=True)
    lab_dir.mkdir(parents=True)
    lab = Lab(lab_dir, tiny_dir)
    began = time.monotonic()
    try:
        with lab.cleanup:
            checks = fault.inject(lab) + [invariant(lab) for invariant in INVARIANTS]
        record["status"] = "pass" if all(c.ok for c in checks) else "fail"
    except Skip as exc:
        checks, record["status"], record["reason"] = [], "skipped", str(exc)
    except Exception as exc:  # noqa: BLE001 -- a fault that could not be driven is a failure, recorded
        checks = [Check("driven", False, f"{type(exc).__name__}: {str(exc)[:2000]}")]
        record["status"] = "fail"
    record["seconds"] = round(time.monotonic() - began, 1)
    record["starts"] = [asdict(s) for s in lab.starts]
    record["facts"] = lab.facts
    record["checks"] = [asdict(c) for c in checks]
    return record


def summary(records: list[dict]) -> str:
    rows = [("fault", "status", "seconds", "failed checks")]
    for r in records:
        failed = ", ".join(c["name"] for c in r["checks"] if not c["ok"]) or r.get("reason", "")[:60]
        rows.append((r["name"], r["status"], f"{r['seconds']:.0f}", failed))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def selected(only: Optional[str]) -> list[Fault]:
    if not only:
        return list(FAULTS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"fault_harness: unknown fault(s) {unknown}; accepted: {list(BY_NAME)} (see --list)")
    return [BY_NAME[n] for n in names]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/fault_harness.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the faults and exit")
    parser.add_argument("--only", help="comma-separated fault names to run (default: every ready fault)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "verl-fault-harness",
                        help="folder for the runs' outputs, one subfolder per fault (default: %(default)s)")
    parser.add_argument("--result", type=Path, help="JSON result file (default: <out>/result.json)")
    parser.add_argument("--tiny-dir", type=Path, help="tiny model and data (default: $VERL_ASCEND_TINY_DIR or "
                        "~/.cache/verl-ascend/tiny; built there if missing)")
    args = parser.parse_args(argv)
    faults = selected(args.only)
    if args.list:
        for fault in faults:
            print(f"{fault.name:20} {fault.what}")
        return 0
    from recipe.dapo_ascend.tiny.assets import build

    tiny = args.tiny_dir or Path(os.environ.get("VERL_ASCEND_TINY_DIR", Path.home() / ".cache/verl-ascend/tiny"))
    tiny_dir = build(tiny)
    result_path = args.result or args.out / "result.json"
    records, began = [], time.monotonic()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped harness still cleans up its runs
    for i, fault in enumerate(faults, 1):
        print(f"[fault-harness] {i}/{len(faults)} {fault.name}: {fault.what}", flush=True)
        record = run_fault(fault, args.out, tiny_dir)
        records.append(record)
        for check in record["checks"]:
            print(f"    {'ok  ' if check['ok'] else 'FAIL'} {check['name']}: {check['detail'][:400]}", flush=True)
        print(f"    -> {record['status']} ({record['seconds']:.0f} s)", flush=True)
    total = round(time.monotonic() - began, 1)
    result = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "total_seconds": total,
              "out": str(args.out), "faults": records}
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(result, indent=2))
    print(summary(records))
    print(f"[fault-harness] {total:.0f} s; result: {result_path}")
    return 1 if any(r["status"] == "fail" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
