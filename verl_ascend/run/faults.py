"""A run that fails while training ends in one line: what happened, what was kept, how to resume.

The driver gets every fault of the run as one exception, wrapped by Ray on its way up: a worker's
error arrives as ``RayTaskError`` (``.cause`` the original, once per hop: worker -> TaskRunner ->
driver), a dead actor as ``ActorDiedError`` whose only record of the actor's class, pid, node and
exit is the text Ray renders from its ``ActorDiedErrorContext``, and the memory monitor's kill as
``OutOfMemoryError`` carrying the monitor's report. ``describe_failure`` walks that chain and
returns the one line the driver prints last (``verl_ascend/launch``: ``report_failure``):

    <what happened: resource, file or process>. Kept: <last complete checkpoint>. <how to resume>

Faults named (most specific first): the rollout watchdog's verdict (``RolloutFailure``: replica,
engine process); a record of the run not written (``RunFileError``); disk full, permission
denied, read-only file system (``OSError`` by errno, the file named); torch's checkpoint writer
failing (see ``probe_folder``); Ray's memory monitor (``OutOfMemoryError``, or an actor it
killed); a Ray actor or worker that died (signal, crash, node lost). Anything else returns None:
the caller prints the traceback and then a generic last line.
"""

from __future__ import annotations

import errno as errno_names
import json
import os
import re
import shlex
import sys
import uuid
from dataclasses import dataclass
from typing import Iterator, Optional

from verl_ascend.run.checkpoints import MARKER, step_dirs, verify_marked
from verl_ascend.run.files import STATUS_FILE, RunFileError

DISK_FULL = (errno_names.ENOSPC, errno_names.EDQUOT)
NOT_PERMITTED = (errno_names.EACCES, errno_names.EPERM, errno_names.EROFS)
# Under this much free space a failed write is taken for a full disk (the write that failed used the rest).
NEARLY_FULL_BYTES = 64 << 20
# Marks of torch's C++ checkpoint writer (caffe2 PyTorchStreamWriter) in a RuntimeError's text.
TORCH_WRITER = ("inline_container.cc", "PytorchStreamWriter", "iostream error", "file write failed")
MEMORY_MONITOR = ("running low on memory", "NODE_OUT_OF_MEMORY", "memory usage threshold", "OOM kill reason")
BATCH_KEYS = "data.train_batch_size, actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, actor_rollout_ref.rollout.max_num_seqs"

RESUME_ADVICE = "run the same command again to resume from the last complete checkpoint."


class RolloutFailure(RuntimeError):
    """Base of the rollout watchdog's errors (:mod:`verl_ascend.run.watchdog`); here, so this module names them without importing it."""



@dataclass(frozen=True)
class RunSite:
    """Where the failing run keeps its files (``RunPaths`` of its config), for the kept/resume part."""

    checkpoints: str  # trainer.default_local_dir, absolute
    run_dir: str
    resume_mode: str = "auto"
    command: Optional[str] = None  # the command to run again (``rerun_command()``), if known


def site_of(config) -> RunSite:
    """The failing run's site: its folders from its config (none for a config without the trainer
    section, as in tests) and the command that resumes it."""
    from verl_ascend.paths import RunPaths

    try:
        paths = RunPaths.of(config)
        folders = (paths.checkpoints, paths.run_dir, str(config.trainer.get("resume_mode", "auto")))
    except Exception:  # nothing kept to name
        folders = ("", "")
    return RunSite(*folders, command=rerun_command())


def chain(exc: Optional[BaseException]) -> Iterator[BaseException]:
    """Every exception behind ``exc``, outermost first, Ray's wrappers left out: a ``RayTaskError``
    (an instance of its cause's class too, with the remote traceback as its text) leads to its
    ``.cause``; then ``__cause__`` and ``__context__``."""
    seen, todo = set(), [exc]
    while todo:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if not any(k.__name__ == "RayTaskError" for k in type(exc).__mro__):
            yield exc
        todo += [getattr(exc, "cause", None), exc.__cause__, exc.__context__]


def describe_failure(exc: BaseException, site: RunSite) -> Optional[str]:
    """The last line for a run that failed with ``exc``, or None for a fault not named here."""
    what = what_happened(exc, site)
    if what is None:
        return None
    return f"{what.rstrip('.; ')}. {kept_and_resume(site)}"


def unnamed_failure(exc: BaseException, site: RunSite) -> str:
    """The last line for a fault ``describe_failure`` does not name: the original error (under Ray's wrappers)."""
    original = next(chain(exc), exc)
    return f"the run stopped: {type(original).__name__}: {first_line(original)}. {kept_and_resume(site)}"


def what_happened(exc: BaseException, site: RunSite) -> Optional[str]:
    """The fault behind ``exc`` in one sentence naming the resource, file or process."""

    causes = list(chain(exc))
    rules = (
        lambda e: isinstance(e, RolloutFailure) and first_line(e).replace(RESUME_ADVICE, "").strip(),
        lambda e: type(e) is RunFileError and _run_file(e),
        lambda e: isinstance(e, OSError) and _os_error(e, site),
        lambda e: isinstance(e, RuntimeError) and any(m in str(e) for m in TORCH_WRITER) and _checkpoint_write(e, site),
        _memory_monitor,
        actor_death,
    )
    for rule in rules:
        for cause in causes:
            found = rule(cause)
            if found:
                return found
    return None


# ----------------------------------------------------------------------------- files and disks
def _run_file(exc: RunFileError) -> str:
    return f"{exc.what()}; the run stopped at the first record it could not keep"


def _os_error(exc: OSError, site: RunSite) -> Optional[str]:
    name = exc.filename or site.checkpoints
    if exc.errno in DISK_FULL:
        return f"no space left on device in {_folder(name)}: cannot write {name} ({_errno(exc)}){_free(name)}"
    if exc.errno in NOT_PERMITTED:
        fix = "make it writable" if exc.errno != errno_names.EROFS else "mount it writable"
        return f"permission denied writing {name} ({_errno(exc)}); {fix}"
    return None


def _checkpoint_write(exc: RuntimeError, site: RunSite) -> str:
    folder = saving_folder(site)
    cause = probe_folder(folder)
    detail = first_line(exc)
    if cause in DISK_FULL:
        return f"no space left on device in {folder}: the checkpoint save failed ({detail}){_free(folder)}"
    if cause in NOT_PERMITTED:
        return (f"permission denied writing the checkpoint folder {folder} "
                f"({errno_names.errorcode[cause]}: {os.strerror(cause)}); make it writable")
    return f"the checkpoint save into {folder} failed ({detail}){_free(folder)}"


def probe_folder(folder: str) -> Optional[int]:
    """The errno a small write into ``folder`` (or its nearest existing parent) fails with, None if it works.

    Why a probe: torch's C++ checkpoint writer reports a failed ``std::ostream`` without its errno
    (``basic_ios::clear: iostream error``, ``unexpected pos N vs M``, ``open file failed``), so the
    cause of a failed save is asked again of the filesystem, at once, by the driver: a file created
    and written there gives the real errno (ENOSPC, EACCES, EPERM, EROFS) and is removed. Run as
    root, a permission bit does not stop the probe, but it does not stop torch either; an
    immutable or read-only folder stops both. Under ``NEARLY_FULL_BYTES`` free counts as full
    (the failed save used the rest; a 1 MiB probe may still fit). On a multi-node run the driver
    sees the folder only if it is shared, which a checkpoint folder of such a run must be."""
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        stat = os.statvfs(folder)
        if stat.f_bavail * stat.f_frsize < NEARLY_FULL_BYTES:
            return errno_names.ENOSPC
    except OSError as exc:
        return exc.errno
    path = os.path.join(folder, f".verl_ascend_write_probe.{uuid.uuid4().hex}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * (1 << 20))
            os.fsync(fd)
        finally:
            os.close(fd)
            os.remove(path)
    except OSError as exc:
        return exc.errno
    return None


def saving_folder(site: RunSite) -> str:
    """The checkpoint folder the run was writing (``status.json`` says which step), else the root."""
    try:
        with open(os.path.join(site.run_dir, STATUS_FILE)) as f:
            status = json.load(f)
        if status.get("phase") == "save_checkpoint":
            return os.path.join(site.checkpoints, f"global_step_{int(status['step'])}")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return site.checkpoints


def _folder(path: str) -> str:
    return path if os.path.isdir(path) else os.path.dirname(path)


def _free(path: str) -> str:
    while path and not os.path.isdir(path):
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path)
    except OSError:
        return ""
    return f"; {stat.f_bavail * stat.f_frsize / 2**20:.1f} MiB free of {stat.f_blocks * stat.f_frsize / 2**20:.0f} MiB"


def _errno(exc: OSError) -> str:
    return f"errno {exc.errno} {errno_names.errorcode.get(exc.errno, '?')}: {exc.strerror}"


# ----------------------------------------------------------------------------- Ray
def _memory_monitor(exc: BaseException) -> Optional[str]:
    text = str(exc)
    is_oom = type(exc).__name__ == "OutOfMemoryError" or (_is_ray_actor_error(exc) and any(m in text for m in MEMORY_MONITOR))
    if not is_oom or not any(m in text for m in MEMORY_MONITOR):
        return None
    task = _field(r"task name=([^,)]+)", text) or _field(r"class_name: (\S+)", text) or "a Ray worker"
    pid = _field(r"\bpid[=:] ?(\d+)", text)
    node = _field(r"Memory on the node \(IP: ([^,]+)", text) or _field(r"ip: (\S+)", text)
    usage = _field(r"was ([\d.]+GB used / [\d.]+GB limit)", text)
    threshold = _field(r"threshold of \d+B \(([\d.]+%)", text) or os.environ.get("RAY_memory_usage_threshold", "0.95")
    where = ", ".join(filter(None, (f"pid {pid}" if pid else "", f"node {node}" if node else "")))
    return (
        f"Ray's memory monitor killed {task}{f' ({where})' if where else ''}: the node's memory "
        f"{f'({usage}) ' if usage else ''}went over RAY_memory_usage_threshold ({threshold}); lower the batch sizes "
        f"({BATCH_KEYS}) or start Ray with a higher RAY_memory_usage_threshold (default 0.95)"
    )


def _is_ray_actor_error(exc: BaseException) -> bool:
    return any(c.__name__ in ("RayActorError", "WorkerCrashedError", "NodeDiedError") for c in type(exc).__mro__)


def actor_death(exc: BaseException) -> Optional[str]:
    """``Ray actor <class> (name, pid, node) died: <why>`` from a Ray actor error's text, else None."""
    if not _is_ray_actor_error(exc):
        return None
    text = str(exc)
    actor = _field(r"class_name: (\S+)", text)
    name = _field(r"\tname: (\S+)", text)
    pid = _field(r"\tpid: (\d+)", text)
    node = _field(r"\tip: (\S+)", text)
    exit_type = _field(r"Worker exit type: (\S+)", text)
    who = f"Ray actor {actor.rsplit('.', 1)[-1]}" if actor else "a Ray worker"  # "create_colocated_worker_cls.<locals>.WorkerDict"
    where = ", ".join(filter(None, (f"name {name}" if name else "", f"pid {pid}" if pid else "",
                                    f"node {node}" if node else "")))
    if exit_type == "SYSTEM_ERROR" or "connection error code" in text or type(exc).__name__ == "WorkerCrashedError":
        why = "its process ended without a word: killed by a signal (SIGKILL, the kernel's OOM killer) or crashed"
    elif exit_type:
        why = f"its process exited ({exit_type})"
    elif type(exc).__name__ == "NodeDiedError":
        why = "its node died or became unreachable"
    else:
        why = first_line(exc)
    return f"{who}{f' ({where})' if where else ''} died: {why}"


def _field(pattern: str, text: str) -> Optional[str]:
    match = re.search(pattern, text)
    return match.group(1).strip() if match else None


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


# ----------------------------------------------------------------------------- kept, resume
def last_complete(root: str) -> Optional[tuple[int, str]]:
    """(step, folder) of the newest checkpoint with a valid marker and the listed sizes (no checksums:
    the resume verifies those before it loads)."""
    for step, path in sorted(step_dirs(root).items(), reverse=True):
        if verify_marked(path, step) is None:
            return step, path
    return None


def rerun_command() -> str:
    """The command to run again to resume: this process's command line as it was started
    (``sys.orig_argv``: interpreter options, ``-m`` module or script, the overrides before Hydra's
    rewrite), the interpreter written ``python`` (a launcher's absolute path to it says nothing to
    the user), e.g. ``python -m verl_ascend train trainer.total_training_steps=3``; started by the
    console script, the command the user typed: ``verl-ascend train trainer.total_training_steps=3``.
    Prefixed with our variables this start was given (``VERL_ASCEND_OUTPUT_DIR=/data/out verl-ascend train
    ...``): the same command resumes only while they are set the same.

    The one spelling of it: a failure's last line (``verl_ascend/launch``), a stop by
    signal, the guardian's message for a dead driver (``lifetime``) and a Ray start that kept timing
    out (``cluster``) all name this command."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    if len(argv) > 1 and os.path.basename(argv[1]) == "verl-ascend":  # the interpreter ran the console script
        command = ["verl-ascend", *argv[2:]]
    else:
        command = ["python", *argv[1:]]
    prefix = assignments(_started_env if _started_env is not None else ours_set(os.environ))
    return f"{prefix} {shlex.join(command)}" if prefix else shlex.join(command)


def assignments(env: dict[str, str]) -> str:
    """``NAME=value ...`` (sorted, shell-quoted): the prefix that gives a command these variables."""
    return " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(env.items()))


# The variables of ours this start was given, as the shell set them: taken by the launch before it exports its
# own (run folder, metrics path, run token) into this process, so a rerun command names only the user's.
_started_env: Optional[dict[str, str]] = None


def ours_set(environ) -> dict[str, str]:
    """Our variables a run depends on that ``environ`` sets: every declared one but the wire formats we set for
    our own processes (``verl_ascend.envs``), and the file logger's ``VERL_FILE_LOGGER_PATH``."""
    from verl_ascend import envs

    try:
        names = {v.name for v in envs.declared().values() if v.kind != "wire" and v.name.startswith("VERL_")}
    except RuntimeError:  # entry points older than setup.py: the command alone
        names = set()
    names.add("VERL_FILE_LOGGER_PATH")
    return {name: environ[name] for name in names if environ.get(name)}


def remember_environment() -> None:
    """Called by the launch first: the environment the rerun command repeats is the one this start got."""
    global _started_env
    _started_env = ours_set(os.environ)


def recorded_steps(run_dir: str) -> str:
    """The run folder's history files with records, as ``metrics.jsonl up to step 3``: what a start that resumes
    nothing must not erase (``run_guard.guard_history`` refuses it); '' when none (or no folder known)."""
    from verl_ascend.run.files import HISTORY_FILES
    from verl_ascend.run.run_guard import history_steps

    if not run_dir:
        return ""
    return ", ".join(f"{name} up to step {step}" for name, step in history_steps(run_dir, HISTORY_FILES).items())


def kept_and_resume(site: RunSite, cause: bool = True) -> str:
    """``Kept: <last complete checkpoint>[; unmarked newer folders]. To resume from it, ...<command>``.

    The one builder of this text: a failure's last line (``cause``: the user fixes it first) and a
    stopped or orphaned run's (``lifetime``, ``guardian``: nothing to fix) say it the same way."""
    fix = "fix the cause and " if cause else ""
    try:
        found = last_complete(site.checkpoints)
        unmarked = [os.path.basename(p) for s, p in sorted(step_dirs(site.checkpoints).items())
                    if not found or s > found[0]]
    except OSError as exc:  # the folder itself is what failed: say so rather than fail the report
        return (f"Kept: unknown (cannot read {site.checkpoints}: {exc.strerror}). To resume, {fix}run "
                f"the same command again{f': {site.command}' if site.command else ''}")
    again = f": {site.command}" if site.command else ""
    recorded = None if found else recorded_steps(site.run_dir)
    if found:
        kept = f"Kept: {found[1]} (step {found[0]}, the last complete checkpoint)"
    elif recorded:
        kept = f"Kept: no complete checkpoint yet, only the records of the steps trained ({recorded})"
    else:
        kept = "Kept: no complete checkpoint yet, so a rerun starts from step 1"
    if unmarked:
        kept += f"; {', '.join(unmarked)}: no {MARKER}, never resumed (a rerun quarantines it)"
    if recorded:  # the same command would be refused: a start resuming nothing on top of recorded steps
        return (f"{kept}. A rerun trains from step 1 and needs fault_tolerance.start_over=true (the records then go "
                f"to dated side files): {fix}run the same command with fault_tolerance.start_over=true{again}")
    if site.resume_mode != "auto":
        return f"{kept}. To resume from it, {fix}run the same command with trainer.resume_mode=auto{again}"
    return f"{kept}. To resume from it, {fix}run the same command again{again}"
