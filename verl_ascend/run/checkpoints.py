"""Checkpoint selection and run preparation: resume after a crash (even ``kill -9``) with nothing lost and nothing counted twice.

Upstream verl 0.9.1 checkpoints every ``trainer.save_freq`` steps into
``<default_local_dir>/global_step_<N>/`` (actor shards from every rank, then the dataloader
state ``data.pt``) and, last, writes ``latest_checkpointed_iteration.txt``; with
``trainer.resume_mode=auto`` a restart loads the step named there. Four gaps remain, each closed
here without touching upstream's checkpoint code:

1. The tracker is rewritten in place (``open("w")``): a kill during that write leaves an empty
   file and the next start dies in ``int("")``; with ``max_actor_ckpt_to_keep=1`` the previous
   checkpoint's shards are deleted before the tracker moves on. Nothing in a step folder says
   whether its write finished.
   -> ``RunJournal`` (a component of the recipe's trainer, ``journal.py``) writes a completion marker
   ``verl_ascend_complete.json`` (every file, its size and its SHA-256, the trainer mode that wrote it,
   the SHA-256 of the marker's own record) once a checkpoint is written *and* its step's metrics are logged; ``plan_resume`` (the entry point, before Ray
   starts, read-only) picks the checkpoint to resume from among marked folders whose sizes match,
   verifying the contents of the one it loads (newest first, falling back with the reason logged);
   a folder without a marker is never picked. ``prepare_run`` (once every check passed) rewrites
   the tracker atomically and quarantines every folder not proven whole as
   ``global_step_<N>.incomplete`` (kept, the reason printed).
2. The file logger opens ``$VERL_FILE_LOGGER_PATH`` with mode ``"wb"``: every restart erased
   the metrics of the steps already trained. -> ``prepare_run`` keeps the records of steps up to
   the resumed one and moves those of steps that will be trained again to a dated side file, and
   the trainer appends (``install_metrics_append``, the one runtime patch here).
3. Which prompts a step consumed was not recorded. -> the trainer appends the dataset ``index``
   of every prompt it takes from the dataloader to ``prompts.jsonl`` (trimmed like the metrics),
   so "no prompt skipped or repeated across a crash" can be checked.
4. Where a run is: ``status.json`` holds the current step and phase (rollout, update_actor,
   save_checkpoint, finished), rewritten atomically at each phase change.

Files of a run (``<run dir>`` = ``$VERL_ASCEND_OUTPUT_DIR/<experiment_name>``): ``metrics.jsonl``,
``prompts.jsonl``, ``rollout_groups.jsonl``, ``status.json``, ``resume.jsonl`` (one line per start:
what was picked and why), ``*.trimmed-<time>.jsonl`` (records a resume removed), ``owner.json``
(``run_guard.py``: who holds the folder's lock).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from verl_ascend import trainer_mode
from verl_ascend.paths import RunPaths
from verl_ascend.run.data_order import ENV_FRESH_DATA_ORDER, record_data_order
from verl_ascend.run.files import (  # file_checksum: re-exported, the resume's digest of each file
    CHECKSUM,
    ENV_METRICS_APPEND,
    ENV_RUN_DIR,
    HISTORY_FILES,
    RESUME_LOG,
    append_jsonl,
    file_checksum,
    side_file_for,
    trim_jsonl,
    write_atomic,
)
from verl_ascend.run.run_guard import StartRefused

MARKER = "verl_ascend_complete.json"
SELF_CHECKSUM = "marker_sha256"  # in the marker: the digest of its own record
MODE_FIELD = trainer_mode.FIELD  # in the marker: the trainer mode the checkpoint was written in
# Recorded in each start's line of resume.jsonl ("settings"): what makes two runs comparable or not
# (``verl-ascend parity`` reads a run's seed, staleness bound and rollout correction from here).
SETTINGS_KEYS = (
    "data.seed",
    "actor_rollout_ref.rollout.seed",
    "trainer.v1.sampler.max_off_policy_threshold",
    "trainer.v1.sampler.max_off_policy_strategy",
    "algorithm.rollout_correction.bypass_mode",
    "algorithm.rollout_correction.rollout_is",
    "algorithm.rollout_correction.rollout_is_threshold",
    "algorithm.rollout_correction.rollout_rs",
)
TRACKER = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
INCOMPLETE_SUFFIX = ".incomplete"


def _log(message: str) -> None:
    print(f"[verl-ascend] resume: {message}", flush=True)


# ----------------------------------------------------------------------------- checkpoints
def step_dirs(root: str) -> dict[int, str]:
    """``{step: path}`` of every ``global_step_<N>`` folder under ``root``."""
    if not os.path.isdir(root):
        return {}
    found = {}
    for name in os.listdir(root):
        match = STEP_DIR.match(name)
        path = os.path.join(root, name)
        if match and os.path.isdir(path):
            found[int(match.group(1))] = path
    return found


def read_tracker(root: str) -> tuple[Optional[int], Optional[str]]:
    """(step, None) or (None, why unusable) for ``latest_checkpointed_iteration.txt``."""
    path = os.path.join(root, TRACKER)
    if not os.path.exists(path):
        return None, "absent"
    try:
        with open(path, "rb") as f:
            raw = f.read().decode().strip()
        return int(raw), None
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        return None, f"unreadable ({exc})"


def list_files(folder: str) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``folder`` except the marker."""
    files = {}
    for dirpath, _dirnames, filenames in os.walk(folder):
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, folder)
            if rel == MARKER or ".tmp." in name:
                continue
            try:
                files[rel] = os.path.getsize(full)
            except OSError:
                continue
    return dict(sorted(files.items()))


def checksums(folder: str, names: Iterable[str], algorithm: str = CHECKSUM) -> dict[str, str]:
    """Digest of every file, several files at once: hashlib releases the GIL on large buffers, so a
    checkpoint of many rank shards is hashed at the storage's read speed, not one core's."""
    names = list(names)
    workers = max(1, min(8, len(names), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = pool.map(lambda rel: file_checksum(os.path.join(folder, rel), algorithm), names)
        return dict(zip(names, digests))


def write_marker(folder: str, step: int, extra: Optional[dict] = None) -> dict:
    """Declare ``folder`` complete: written last, atomically, listing every file, its size and its
    checksum (so a resume can tell a damaged shard from a good one of the same size)."""
    files = list_files(folder)
    marker = {
        "step": int(step),
        "files": files,
        "checksum": CHECKSUM,
        "checksums": checksums(folder, files),
        "time": time.time(),
        **(extra or {}),
    }
    marker[SELF_CHECKSUM] = marker_digest(marker)
    write_atomic(os.path.join(folder, MARKER), json.dumps(marker, indent=1).encode())
    return marker


def marker_digest(marker: dict) -> str:
    """SHA-256 of the marker's own record (every field but this digest): a marker edited or damaged after it
    was written is told apart from a shard whose content changed."""
    record = {k: v for k, v in marker.items() if k != SELF_CHECKSUM}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def marker_fault(marker: dict) -> Optional[str]:
    """Why the marker's own record cannot be trusted (None when it can): its self-checksum does not match
    (markers written before it was kept have none), or a recorded digest is not one of its algorithm."""
    recorded = marker.get(SELF_CHECKSUM)
    if recorded is not None and recorded != marker_digest(marker):
        return f"{MARKER} itself was changed after it was written (its {SELF_CHECKSUM} does not match its record)"
    algorithm = marker.get("checksum", CHECKSUM)
    if algorithm not in hashlib.algorithms_available:
        return f"{MARKER} names an unknown checksum algorithm {algorithm!r}"
    width = hashlib.new(algorithm).digest_size * 2
    for rel, digest in (marker.get("checksums") or {}).items():
        if not (isinstance(digest, str) and len(digest) == width and all(c in "0123456789abcdef" for c in digest)):
            return f"{MARKER} records {digest!r} as the {algorithm} checksum of {rel}, which is no {algorithm} digest"
    return None


def remove_marker(folder: str) -> None:
    try:
        os.remove(os.path.join(folder, MARKER))
    except FileNotFoundError:
        pass


def read_marker(folder: str) -> tuple[Optional[dict], Optional[str]]:
    path = os.path.join(folder, MARKER)
    if not os.path.exists(path):
        return None, f"no {MARKER} (its write never finished)"
    try:
        with open(path, "rb") as f:
            marker = json.loads(f.read())
        int(marker["step"])
        dict(marker["files"])
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return None, f"{MARKER} is unreadable ({exc})"
    return marker, None


def verify_marked(folder: str, step: int, content: bool = False) -> Optional[str]:
    """None if ``folder`` carries a valid marker and every file it lists is intact, else why not.

    Sizes always (cheap); with ``content=True`` also every file's checksum (reads the checkpoint)."""
    marker, why = read_marker(folder)
    if marker is None:
        return why
    fault = marker_fault(marker)
    if fault is not None:
        return f"{fault}: the marker is damaged, not proven to be the shards' (they were not judged)"
    files, marked_step = marker["files"], int(marker["step"])
    if marked_step != step:
        return f"{MARKER} names step {marked_step}, not {step}"
    if "data.pt" not in files:
        return f"{MARKER} lists no data.pt"
    for rel, size in files.items():
        full = os.path.join(folder, rel)
        if not os.path.isfile(full):
            return f"{rel} is missing"
        if os.path.getsize(full) != size:
            return f"{rel} has {os.path.getsize(full)} bytes, {size} expected"
    return verify_content(folder, marker) if content else None


def verify_content(folder: str, marker: dict) -> Optional[str]:
    """Every file's checksum against the marker's; None when they all match."""
    expected = marker.get("checksums")
    if not expected:
        return (f"{MARKER} records no checksums (written before checksums were kept): its contents cannot be "
                f"proven whole; to load it anyway, remove {MARKER} and name the folder by trainer.resume_from_path")
    try:
        actual = checksums(folder, expected, marker.get("checksum", CHECKSUM))
    except (OSError, ValueError) as exc:
        return f"cannot read for its checksum ({exc})"
    for rel, digest in expected.items():
        if actual[rel] != digest:
            return (f"{rel} does not match its {marker.get('checksum', CHECKSUM)} checksum recorded in {MARKER} "
                    "(same size, different content: the shard changed after the marker was written)")
    return None


def verify_unmarked(folder: str, world_size: int, save_contents: Iterable[str]) -> Optional[str]:
    """For a checkpoint named by ``trainer.resume_from_path`` that carries no marker (another
    trainer wrote it): every expected file exists. Never used to pick a checkpoint by itself."""
    if not os.path.isfile(os.path.join(folder, "data.pt")):
        return "data.pt is missing"
    prefixes = {"model": "model", "optimizer": "optim", "extra": "extra_state"}
    for content in save_contents:
        prefix = prefixes.get(content)
        if prefix is None:
            continue
        for rank in range(world_size):
            name = f"{prefix}_world_size_{world_size}_rank_{rank}.pt"
            if not os.path.isfile(os.path.join(folder, "actor", name)):
                return f"actor/{name} is missing"
    return None


@dataclass
class Selection:
    step: int  # 0 = start from scratch
    path: Optional[str]
    rejected: dict[int, str] = field(default_factory=dict)  # step -> why not usable
    tracker_step: Optional[int] = None
    tracker_problem: Optional[str] = None


def select_checkpoint(root: str) -> Selection:
    """The checkpoint ``resume_mode=auto`` should load: only one proven whole.

    The tracker's checkpoint if it is complete; otherwise the newest complete one before it
    (any complete one if the tracker is unreadable). Complete = its marker is there, every file
    it lists has the listed size and the listed checksum. A folder without a marker is never a
    candidate, whatever files it holds: its write (or the step's metrics) never finished.
    """
    dirs = step_dirs(root)
    tracker_step, tracker_problem = read_tracker(root)
    rejected = {}
    intact = []  # by marker, files and sizes: cheap, for every folder
    for step, path in sorted(dirs.items()):
        why = verify_marked(path, step)
        if why is None:
            intact.append(step)
        else:
            rejected[step] = why
    limit = tracker_step if tracker_step is not None else float("inf")
    candidates = sorted((s for s in intact if s <= limit), reverse=True)
    chosen = 0
    # Content (checksums) only for the checkpoint about to be loaded, newest first: reading a
    # 400 GB checkpoint is paid once per start, not once per folder kept.
    for step in candidates:
        why = verify_marked(dirs[step], step, content=True)
        if why is None:
            chosen = step
            break
        rejected[step] = why
        _log(f"global_step_{step} is damaged ({why}); falling back to an older checkpoint")
    if tracker_step is not None and tracker_step not in dirs:
        rejected.setdefault(tracker_step, "named by the tracker but absent")
    return Selection(
        step=chosen,
        path=dirs.get(chosen),
        rejected=rejected,
        tracker_step=tracker_step,
        tracker_problem=tracker_problem,
    )


def quarantine(path: str) -> str:
    """Rename an interrupted checkpoint folder out of upstream's way; returns the new name."""
    target = path + INCOMPLETE_SUFFIX
    n = 1
    while os.path.exists(target):
        n += 1
        target = f"{path}{INCOMPLETE_SUFFIX}{n}"
    os.replace(path, target)
    return target


def repair_checkpoints(root: str, selection: Optional[Selection] = None) -> Selection:
    """Make ``root`` say exactly what ``select_checkpoint`` picked: tracker rewritten atomically
    (set aside as ``.invalid`` when starting from scratch), every folder not proven whole renamed
    away (``global_step_<N>.incomplete``, the reason printed), nothing deleted."""
    selection = selection or select_checkpoint(root)
    for step, path in step_dirs(root).items():
        if step in selection.rejected:
            new = quarantine(path)
            _log(f"{os.path.basename(path)} is not proven whole ({selection.rejected[step]}); quarantined as "
                 f"{os.path.basename(new)} (kept, never loaded)")
    tracker = os.path.join(root, TRACKER)
    if selection.step > 0:
        if selection.tracker_step != selection.step:
            write_atomic(tracker, str(selection.step).encode())
    elif os.path.exists(tracker):
        os.replace(tracker, tracker + ".invalid")
    return selection


# ----------------------------------------------------------------------------- driver side
def export_to_workers(config, env: dict[str, str]) -> None:
    """Set ``env`` here and in the Ray runtime env, so every worker on every node sees it."""
    from omegaconf import open_dict

    os.environ.update(env)
    with open_dict(config):
        runtime_env = config.ray_kwargs.ray_init.setdefault("runtime_env", {})
        env_vars = runtime_env.setdefault("env_vars", {})
        for key, value in env.items():
            env_vars[key] = value


@dataclass
class Plan:
    """Where a start would resume, decided without changing a byte on disk."""

    step: int
    why: str  # what the decision rests on, for messages
    checkpoint_dir: str
    run_dir: str
    metrics_path: Optional[str]
    selection: Optional[Selection] = None
    data_order: Optional[dict] = None  # data_order.plan_data_order's decision
    folders: tuple[str, ...] = ()  # run folder and checkpoint folder: locked once the start commits
    start_over: bool = False  # fault_tolerance.start_over on top of recorded history
    checkpoint: Optional[str] = None  # the folder resumed (None = from scratch)


def run_paths(config) -> tuple[str, str]:
    """(run folder, checkpoint folder) of this run, absolute."""
    paths = RunPaths.of(config)
    return paths.run_dir, paths.checkpoints


def existing_run_folders(config) -> list[str]:
    """The run's folders to lock first, before any check ([] when a path key is missing or broken:
    the checks name it)."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return list(run_paths(config))
    except OmegaConfBaseException:
        return []


def plan_start(config) -> Plan:
    """Read-only: what this start resumes, whether recorded history allows it, and its data order;
    raises ``StartRefused`` (or ``NothingToTrain``) before any file changes."""
    from verl_ascend.run import data_order, run_guard
    from verl_ascend.run.options import FaultTolerance

    options = FaultTolerance.from_config(config)
    plan = plan_resume(config)
    plan.folders = run_paths(config)
    refuse_tracker_behind(plan, options.start_over)
    check_trainer_mode(config, plan, options.start_over)
    plan.start_over = run_guard.guard_history(plan.run_dir, plan.step, plan.why, HISTORY_FILES, options.start_over)
    run_guard.check_nothing_left(config.trainer.get("total_training_steps"), plan.step)
    plan.data_order = data_order.plan_data_order(config, plan.step, plan.run_dir, options.new_data_order)
    return plan


def commit_start(config, plan: Plan) -> int:
    """The start is committed: own the run folder, then bring its files in line with ``plan``."""
    from verl_ascend.run.run_guard import RunLock

    RunLock.record_owner(plan.run_dir)
    if plan.start_over:
        print(f"[verl-ascend] fault_tolerance.start_over=true: {plan.why}; earlier records go to dated side files", flush=True)
    return prepare_run(config, plan)  # checkpoint picked; metrics/prompt logs continue


def plan_resume(config) -> Plan:
    """Read-only: the step this start would resume after (0 = from scratch) and why; raises
    ``run_guard.StartRefused`` for a checkpoint named that cannot be resumed."""
    trainer = config.trainer
    paths = RunPaths.of(config)
    metrics_path, root, run_dir = paths.metrics, paths.checkpoints, paths.run_dir
    mode = str(trainer.get("resume_mode", "auto"))
    plan = Plan(0, "", root, run_dir, metrics_path)
    if mode == "disable":
        plan.why = "trainer.resume_mode=disable"
    elif mode == "resume_path":
        path = os.path.abspath(os.path.expanduser(str(trainer.resume_from_path)))
        match = STEP_DIR.match(os.path.basename(path.rstrip("/")))
        if not match or not os.path.isdir(path):
            raise StartRefused(f"trainer.resume_from_path={path!r} is not an existing global_step_<N> checkpoint folder")
        step = int(match.group(1))
        marked = os.path.exists(os.path.join(path, MARKER))
        if marked:
            why = verify_marked(path, step, content=True)
        else:  # named by hand (e.g. another trainer's checkpoint): the files can only be counted
            world_size = int(trainer.nnodes) * int(trainer.n_gpus_per_node)
            save_contents = list(config.actor_rollout_ref.actor.checkpoint.get("save_contents", ["model"]) or [])
            why = verify_unmarked(path, world_size, save_contents)
        if why is not None:
            raise StartRefused(f"trainer.resume_from_path={path!r} is not a complete checkpoint: {why}")
        unproven = "" if marked else f" (no {MARKER}: its files exist, their contents are not proven)"
        plan.step, plan.why, plan.checkpoint = step, f"trainer.resume_from_path={path}{unproven}", path
    else:
        plan.selection = select_checkpoint(root)
        refuse_meaningless_tracker(root, plan.selection)
        plan.step, plan.checkpoint = plan.selection.step, plan.selection.path
        if plan.step:
            plan.why = f"resuming after step {plan.step} from {plan.selection.path}"
        elif plan.selection.rejected:
            reasons = "; ".join(f"global_step_{k}: {v}" for k, v in sorted(plan.selection.rejected.items()))
            plan.why = f"no checkpoint proven whole in trainer.default_local_dir={root} ({reasons}); starting fresh"
        else:
            plan.why = f"no checkpoint in trainer.default_local_dir={root}"
    return plan


# What upstream's V1 trainers (verl 0.9.1, trainer_base.py _save_checkpoint/_load_checkpoint) keep in a
# checkpoint beyond actor/ and data.pt: the async modes write transfer_queue/ (prompts taken from the
# dataloader but not yet trained into these weights, re-issued on resume); sync writes and reads none.
_ASYNC_TO_SYNC = ("it holds transfer_queue/, the prompts the async trainer had taken from the dataloader but not yet "
                  "trained; sync never reads it, and its data.pt position is already past them: those prompts would be "
                  "skipped")
_SYNC_TO_ASYNC = ("sync writes no transfer_queue/, which the async trainer reads back on resume: it would start with "
                  "an empty queue, and the run's steps would mix on-policy and off-policy training")
_ASYNC_TO_ASYNC = ("both write transfer_queue/, but its prompts were queued under the other mode's placement and "
                   "weight sync: the run's steps would mix two trainers' schedules")


def recorded_mode(folder: str) -> Optional[str]:
    """The trainer mode a checkpoint was written in, from its marker (``RunJournal`` records it);
    None when unknown (no marker, or a marker written before the mode was recorded)."""
    marker, _ = read_marker(folder)
    mode = marker.get(MODE_FIELD) if marker else None
    return str(mode) if mode is not None else None


def recorded_settings(config) -> dict[str, Any]:
    """The values of ``SETTINGS_KEYS`` in the composed config (None where absent or unresolvable)."""
    from omegaconf import OmegaConf

    out = {}
    for key in SETTINGS_KEYS:
        value = OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)
        out[key] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return out


def check_trainer_mode(config, plan: Plan, start_over: bool) -> None:
    """Read-only, before Ray: a resume in another trainer mode than its checkpoint's is refused,
    naming both modes and what upstream's trainers keep differently. With ``resume_mode=auto`` and
    ``fault_tolerance.start_over=true`` the plan becomes a start from step 1 in the new mode instead."""
    if not plan.step or not plan.checkpoint:
        return
    wanted, written = trainer_mode.mode_of(config), recorded_mode(plan.checkpoint)
    if written is None:
        _log(f"{os.path.basename(plan.checkpoint)} records no trainer mode (written before verl-ascend recorded it): "
             f"resumed in {wanted} unchecked")
        return
    if written == wanted:
        return
    auto = plan.selection is not None
    if auto and start_over:
        plan.why = (f"{trainer_mode.KEY}={wanted} and fault_tolerance.start_over=true over checkpoints written in "
                    f"{written} ({TRACKER} set aside, the checkpoints kept)")
        plan.step, plan.checkpoint = 0, None
        plan.selection = Selection(0, None, plan.selection.rejected, plan.selection.tracker_step,
                                   plan.selection.tracker_problem)
        return
    differs = _SYNC_TO_ASYNC if written == trainer_mode.SYNC else _ASYNC_TO_SYNC if wanted == trainer_mode.SYNC \
        else _ASYNC_TO_ASYNC
    other = (f"fault_tolerance.start_over=true to train {wanted} from step 1 in this folder (earlier records go to "
             "dated side files, the checkpoints stay)" if auto else
             "trainer.resume_from_path naming a checkpoint written in this mode")
    raise StartRefused(
        f"{trainer_mode.KEY}={wanted}, but the checkpoint this start would resume ({plan.checkpoint}) was written in "
        f"{written} (recorded in its {MARKER}): {differs}. Accepted: {trainer_mode.KEY}={written} to resume it, "
        f"{other}, or a new trainer.experiment_name. Nothing was changed on disk"
    )


def refuse_meaningless_tracker(root: str, selection: Selection) -> None:
    """A tracker naming step 0 or below was written by hand (upstream writes the step of a saved
    checkpoint, >= 1): which checkpoint was meant cannot be guessed, so the start is refused."""
    step = selection.tracker_step
    if step is None or step >= 1:
        return
    complete = [s for s in sorted(step_dirs(root)) if s not in selection.rejected]
    shown = ", ".join(f"global_step_{s}" for s in complete) or "none"
    raise StartRefused(
        f"{os.path.join(root, TRACKER)} reads {step}, which names no checkpoint (steps start at 1); complete "
        f"checkpoints in trainer.default_local_dir: {shown}. Accepted: the step of the checkpoint to resume from "
        f"in that file (e.g. {complete[-1] if complete else 1}), or remove the file to resume from the newest complete one"
    )


def refuse_tracker_behind(plan: Plan, start_over: bool) -> None:
    """A tracker naming a step that is no complete checkpoint, with complete ones after it (``1`` with 2/4/6):
    upstream resumes only the step that file names, so this start would resume nothing and train from
    step 1. Refused unless ``fault_tolerance.start_over=true``, offering the fix that keeps the work first."""
    selection, root = plan.selection, plan.checkpoint_dir
    if selection is None or plan.step or start_over or selection.tracker_step is None or selection.tracker_step < 1:
        return
    step = selection.tracker_step
    after = [s for s in sorted(step_dirs(root)) if s > step and s not in selection.rejected]
    if not after:
        return
    tracker = os.path.join(root, TRACKER)
    shown = ", ".join(f"global_step_{s}" for s in after)
    raise StartRefused(
        f"{tracker} reads {step}, but global_step_{step} is no complete checkpoint "
        f"({selection.rejected.get(step, 'absent')}) while complete checkpoints follow it in trainer.default_local_dir: "
        f"{shown}; this start would resume nothing and train from step 1. Accepted: the step to resume from in that "
        f"file (e.g. `echo {after[-1]} > {tracker}` resumes after step {after[-1]}), or remove the file to resume from "
        "the newest complete one; fault_tolerance.start_over=true trains from step 1 instead (earlier records go to "
        "dated side files). Nothing was changed on disk"
    )


def prepare_run(config, plan: Plan) -> int:
    """Driver side, before Ray starts, once every check has passed: make every file agree with ``plan``.

    Returns the step training resumes after (0 = from scratch). Mutates ``config`` only to make
    ``trainer.default_local_dir`` absolute (Ray workers may run in another directory), and
    exports the run directory and the metrics-append switch to every worker.
    """
    from omegaconf import open_dict

    trainer, run_dir, metrics_path, step = config.trainer, plan.run_dir, plan.metrics_path, plan.step
    with open_dict(config):
        trainer.default_local_dir = plan.checkpoint_dir
    os.makedirs(run_dir, exist_ok=True)
    if metrics_path:
        os.environ.setdefault("VERL_FILE_LOGGER_PATH", metrics_path)
    record: dict[str, Any] = {"time": time.time(), "resume_mode": str(trainer.get("resume_mode", "auto")),
                              "checkpoint_dir": plan.checkpoint_dir}
    selection = plan.selection
    if selection is not None:
        repair_checkpoints(plan.checkpoint_dir, selection=selection)
        record.update(
            tracker_step=selection.tracker_step,
            tracker_problem=selection.tracker_problem,
            rejected={str(k): v for k, v in selection.rejected.items()},
        )
        if selection.tracker_problem and selection.tracker_problem != "absent":
            _log(f"{TRACKER} is {selection.tracker_problem}")
    _log(plan.why if step else f"training starts from step 1: {plan.why}")
    record["resume_step"] = step
    record[trainer_mode.FIELD] = trainer_mode.mode_of(config)
    record["settings"] = recorded_settings(config)

    # Metrics, the prompt ledger and the rollout-group ledger describe the run as if it had never
    # stopped: records of steps that will be trained again move to a dated side file, the
    # trainer appends from there on.
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    trimmed = {}
    for name in HISTORY_FILES:
        path = metrics_path if name == "metrics.jsonl" and metrics_path else os.path.join(run_dir, name)
        kept, dropped = trim_jsonl(path, step, side_file_for(path, stamp))
        trimmed[name] = [kept, dropped]
        if dropped:
            _log(f"{path}: kept {kept} records up to step {step}; {dropped} moved to {side_file_for(path, stamp)}")
    record["trimmed"] = trimmed
    fresh_order = False
    if plan.data_order is not None:
        record_data_order(run_dir, plan.data_order)
        fresh_order = plan.data_order["fresh_order"]
        record["data_order"] = {"fresh_order": fresh_order, "note": plan.data_order["note"]}
    append_jsonl(os.path.join(run_dir, RESUME_LOG), record)

    env = {ENV_RUN_DIR: run_dir, ENV_METRICS_APPEND: "1", ENV_FRESH_DATA_ORDER: "1" if fresh_order else "0"}
    if metrics_path:
        # Nodes started with `ray start` do not inherit the driver's environment: without this
        # the trainer's file logger writes to ./<project>/<experiment>.jsonl on its own node.
        env["VERL_FILE_LOGGER_PATH"] = os.path.abspath(metrics_path)
    export_to_workers(config, env)
    return step
