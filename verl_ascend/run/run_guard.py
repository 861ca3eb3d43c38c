"""What must hold before a run may touch its output folder, all decided in the driver before Ray.

- **The checkpoint destination works** (``check_destination``): ``trainer.default_local_dir`` and
  the run folder can be written (probed with an unnamed temporary file, so nothing is left), no
  part of the path is a regular file, and the file system has room for one checkpoint of this
  model (estimated from the parameter count in the model's safetensors headers and what
  ``checkpoint.save_contents`` saves). ``trainer.save_freq <= 0`` (no checkpoint at all, not even
  at the last step) is refused unless ``fault_tolerance.allow_no_checkpoints=true``.
- **One live run per output folder** (``RunLock``): an advisory ``fcntl.flock`` on the run folder
  and on the checkpoint folder, held for the driver's life and, through a copy of the descriptors,
  by its guardian until the last process of the run is gone (``lifetime.py``); the OS releases it
  on any exit, even ``kill -9``. The holder's PID and host are in ``owner.json``; a second run
  exits at once naming them.
- **History is not erased by a start that resumes nothing** (``guard_history``): when the run
  folder holds metrics or a prompt ledger but there is no checkpoint to continue from (a mistyped
  ``default_local_dir``, deleted checkpoints, ``resume_mode=disable``), the start is refused
  unless ``fault_tolerance.start_over=true`` (the old records then go to dated side files).
- **Nothing to train** (``NothingToTrain``): the resumed checkpoint already reached
  ``trainer.total_training_steps``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import struct
import tempfile
import time
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from verl_ascend.run.options import FaultTolerance

OWNER_FILE = "owner.json"
# Bytes per parameter in one checkpoint, by ``actor.checkpoint.save_contents`` entry: fp32 weights
# (FSDP keeps fp32 master weights), Adam's two fp32 moments, a bf16 HF copy.
BYTES_PER_PARAM = {"model": 4, "optimizer": 8, "hf_model": 2}


class StartRefused(ValueError):
    """A start that must not go ahead (raised before anything in the output folder changes); the message
    names the key or file at fault and what is accepted. The recipe's entry point exits 2 on it."""


class NothingToTrain(Exception):
    """The run already reached its last step: say so and start nothing."""


# ----------------------------------------------------------------------------- destination
def nearest_existing(path: str, key: str) -> str:
    """The deepest existing folder on ``path``'s way; a regular file on the way is an error."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        if os.path.islink(probe):  # creating anything below it would fail with FileNotFoundError
            raise StartRefused(
                f"{key}={path!r}: {probe!r} is a symbolic link to {os.readlink(probe)!r}, which does not exist; "
                "accepted: create the link's target, or a path without a dangling link"
            )
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise StartRefused(f"{key}={path!r}: {probe!r} is a file, not a folder; accepted: a folder path")
    return probe


def check_writable(path: str, key: str) -> str:
    """Probe that a file can be created where ``path`` is (or would be); returns that folder."""
    folder = nearest_existing(path, key)
    try:
        with tempfile.TemporaryFile(dir=folder):  # O_TMPFILE where available: never has a name
            pass
    except OSError as exc:
        raise StartRefused(f"{key}={path!r}: cannot write in {folder!r} ({exc.strerror or exc}); accepted: a writable folder") from exc
    return folder


def parameter_count(model_path: str) -> Optional[int]:
    """Parameters in the model's ``*.safetensors`` files, from their headers (no weights read)."""
    total, seen = 0, False
    for name in sorted(os.listdir(model_path)):
        if not name.endswith(".safetensors"):
            continue
        try:
            with open(os.path.join(model_path, name), "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
        except (OSError, ValueError, struct.error):
            continue
        for tensor, info in header.items():
            if tensor == "__metadata__" or not isinstance(info, dict):
                continue
            count = 1
            for dim in info.get("shape", []):
                count *= int(dim)
            total += count
            seen = True
    if seen:
        return total
    weights = [os.path.join(model_path, n) for n in os.listdir(model_path) if n.endswith((".bin", ".pt"))]
    return sum(os.path.getsize(w) for w in weights) // 2 if weights else None  # bf16 assumed


def checkpoint_bytes(config: DictConfig) -> Optional[int]:
    """Estimated size of one checkpoint of this model: parameters x bytes saved per parameter."""
    params = parameter_count(os.path.expanduser(str(config.actor_rollout_ref.model.path)))
    if params is None:
        return None
    contents = OmegaConf.select(config, "actor_rollout_ref.actor.checkpoint.save_contents", default=["model"]) or []
    return params * sum(BYTES_PER_PARAM.get(str(c), 0) for c in contents)


def check_destination(config: DictConfig) -> None:
    """Checkpoint folder and run folder writable, room for one checkpoint, some checkpoint saved; the
    run folder inside the output folder and the metrics file a regular file. Raises ``StartRefused``."""
    from verl_ascend.paths import RunPaths

    paths = RunPaths.of(config)
    run_dir, out = paths.run_dir, paths.output_dir
    if os.path.commonpath([out, os.path.abspath(run_dir)]) != out:
        raise StartRefused(
            f"trainer.experiment_name={config.trainer.experiment_name!r} puts the run folder at {run_dir!r}, outside "
            f"the output folder {out!r}; accepted: a plain folder name"
        )
    _check_checkpoint_room(config, run_dir)
    if paths.metrics and os.path.exists(paths.metrics) and not os.path.isfile(paths.metrics):
        # A device or a FIFO (/dev/full, /dev/zero) is read back at resume and by the progress line: endless.
        raise StartRefused(f"VERL_FILE_LOGGER_PATH={paths.metrics!r} is not a regular file; accepted: a file path")
    if paths.metrics and os.path.dirname(paths.metrics) != run_dir:  # VERL_FILE_LOGGER_PATH elsewhere
        check_writable(os.path.dirname(paths.metrics), "VERL_FILE_LOGGER_PATH")


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``): ``destination_unusable``, the launch check of the run's
    folders, a rule of the one pipeline (after ``model_unusable``: the checkpoint-size estimate reads the model)."""
    global _destination_rule
    from verl_ascend import checks
    from verl_ascend.checks.pipeline import INPUTS, from_check

    if _destination_rule is None:  # one rule object: registering it again is a no-op
        _destination_rule = from_check("destination_unusable", check_destination, (StartRefused,), stage=INPUTS,
                                       needs=("model_unusable",))
    checks.register(_destination_rule)


_destination_rule = None


def _check_checkpoint_room(config: DictConfig, run_dir: str) -> None:
    trainer = config.trainer
    ckpt_root = os.path.abspath(os.path.expanduser(str(trainer.default_local_dir)))
    folder = check_writable(ckpt_root, "trainer.default_local_dir")
    check_writable(run_dir, "trainer.experiment_name (run folder under $VERL_ASCEND_OUTPUT_DIR)")
    options = FaultTolerance.from_config(config)
    if int(trainer.save_freq) <= 0 and not options.allow_no_checkpoints:
        raise StartRefused(
            f"trainer.save_freq={trainer.save_freq} saves no checkpoint at all, not even after the last step: a crash "
            "loses the whole run. Accepted: trainer.save_freq >= 1 (the last step always saves), or "
            "fault_tolerance.allow_no_checkpoints=true to run without checkpoints on purpose"
        )
    need = checkpoint_bytes(config)
    if need and options.check_free_space:
        free = shutil.disk_usage(folder).free
        if free < need:
            raise StartRefused(
                f"trainer.default_local_dir={ckpt_root!r}: {free / 2**30:.2f} GiB free in {folder!r}, one checkpoint of "
                f"this model needs about {need / 2**30:.2f} GiB: the first save, after trainer.save_freq={trainer.save_freq} "
                "steps, would fail. Accepted: a folder with room for one checkpoint (or fault_tolerance.check_free_space=false)"
            )


# ----------------------------------------------------------------------------- one run per folder
def _lock_holder(fd: int) -> Optional[int]:
    """PID holding a flock on ``fd``'s file, from /proc/locks (Linux); None if not found."""
    try:
        inode = os.fstat(fd).st_ino
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if "FLOCK" in parts and len(parts) > 5 and parts[5].endswith(f":{inode}"):
                    return int(parts[4])
    except (OSError, ValueError):
        return None
    return None


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError, OverflowError):
        return True  # someone else's process, or not a PID we can judge: assume it lives
    return True


class RunLock:
    """``fcntl.flock`` on folders, held until this process exits (the OS drops it on a crash)."""

    held: list[int] = []  # every lock's descriptor, copied by the guardian (``lifetime.py``)

    locked: dict[str, int] = {}  # folder -> its descriptor in ``held``

    @classmethod
    def acquire(cls, folders: list[str], create: bool = False) -> list[str]:
        """Lock each folder (those that do not exist yet only with ``create``: a start that may
        still be refused creates nothing); returns the folders this call locked. Raises
        ``StartRefused`` naming the holder when another run has one."""
        taken = []
        for folder in dict.fromkeys(os.path.abspath(f) for f in folders):
            if folder in cls.locked or not (create or os.path.isdir(folder)):
                continue
            os.makedirs(folder, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    os.close(fd)
                    raise
                holder = cls.describe_holder(folder, fd)
                os.close(fd)
                raise StartRefused(
                    f"another run is using {folder!r}: {holder}. One live run per output folder: wait for it to "
                    "finish, or give this one another trainer.experiment_name / trainer.default_local_dir"
                ) from exc
            cls.held.append(fd)
            cls.locked[folder] = fd
            taken.append(folder)
        return taken

    @classmethod
    def release(cls, folders: list[str]) -> None:
        """Drop the locks on ``folders`` (a start stopped after taking them), as the end of the process would."""
        for folder in folders:
            fd = cls.locked.pop(os.path.abspath(folder), None)
            if fd is not None:
                cls.held.remove(fd)
                os.close(fd)

    @staticmethod
    def describe_holder(folder: str, fd: int) -> str:
        owner = {}
        try:
            with open(os.path.join(folder, OWNER_FILE)) as f:
                owner = json.load(f)
        except (OSError, ValueError):
            pass
        pid = _lock_holder(fd)
        if owner and (pid is None or owner.get("pid") == pid):
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("time", 0)))
            ended = ""
            if owner.get("host") == socket.gethostname() and not _alive(owner.get("pid")):
                ended = ("; that driver has ended and its guardian holds the lock until the run's last processes "
                         "are gone: retry in a few seconds")
            return f"PID {owner.get('pid')} on host {owner.get('host')} (since {since}: {owner.get('command', '')}){ended}"
        return f"PID {pid if pid is not None else '?'} on host {socket.gethostname()} (still starting)"

    @staticmethod
    def record_owner(folder: str) -> None:
        """Say who holds the lock; written once the run is committed to start."""
        from verl_ascend.run.files import write_atomic

        owner = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(), "command": " ".join(os.sys.argv)}
        write_atomic(os.path.join(folder, OWNER_FILE), json.dumps(owner).encode())


# ----------------------------------------------------------------------------- history
def history_steps(run_dir: str, files: tuple[str, ...]) -> dict[str, int]:
    """``{file: highest step recorded}`` for the run's history files that hold records."""
    from verl_ascend.run.files import read_jsonl

    found = {}
    for name in files:
        steps = [r.get("step") for r in read_jsonl(os.path.join(run_dir, name))]
        steps = [s for s in steps if isinstance(s, int)]
        if steps:
            found[name] = max(steps)
    return found


def guard_history(run_dir: str, resume_step: int, why: str, files: tuple[str, ...], start_over: bool) -> bool:
    """Refuse a start that resumes nothing on top of recorded steps; True = start over (allowed by
    ``fault_tolerance.start_over``)."""
    if resume_step > 0:
        return False
    history = history_steps(run_dir, files)
    if not history:
        return False
    if start_over:
        return True
    shown = ", ".join(f"{name} up to step {step}" for name, step in history.items())
    raise StartRefused(
        f"{run_dir!r} holds the history of an earlier run ({shown}) but this start resumes nothing ({why}); "
        "starting would discard it. Accepted: fix trainer.default_local_dir / trainer.resume_mode so the run "
        "resumes, a new trainer.experiment_name, or fault_tolerance.start_over=true to train from step 1 "
        "(the old records are kept in dated side files next to them)"
    )


def check_nothing_left(total, resume_step: int) -> None:
    """``NothingToTrain`` when the resumed step already reaches ``trainer.total_training_steps`` (``total``)."""
    if resume_step and isinstance(total, int) and resume_step >= total:
        raise NothingToTrain(
            f"nothing to train: the checkpoint resumed from is at step {resume_step} and "
            f"trainer.total_training_steps={total}. Raise trainer.total_training_steps to train further, or use a new "
            "trainer.experiment_name for a new run; Ray was not started"
        )
