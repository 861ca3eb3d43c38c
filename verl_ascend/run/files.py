"""Crash-safe files of a run: atomic rewrites and JSON-lines ledgers, and the names of a run's files.

A kill (even ``kill -9``) at any instant leaves either the old or the new bytes (``write_atomic``) or
whole lines plus at most one torn last line (``append_jsonl``, read back by ``read_jsonl``, which drops
torn lines). ``trim_jsonl`` rolls a ledger back to a step without destroying anything.

Files of a run (``<run dir>`` = ``$VERL_ASCEND_OUTPUT_DIR/<experiment_name>``): ``metrics.jsonl``,
``prompts.jsonl``, ``rollout_groups.jsonl``, ``status.json``, ``resume.jsonl`` (one line per start:
what was picked and why), ``*.trimmed-<time>.jsonl`` (records a resume removed), ``owner.json``
(``run_guard.py``: who holds the folder's lock).
"""

from __future__ import annotations

import errno as errno_names
import hashlib
import json
import os
from typing import Optional

# Environment shared by the driver and the trainer (exported to every Ray worker).
ENV_RUN_DIR = "VERL_ASCEND_RUN_DIR"
ENV_METRICS_APPEND = "VERL_ASCEND_METRICS_APPEND"

PROMPTS_FILE = "prompts.jsonl"
STATUS_FILE = "status.json"
RESUME_LOG = "resume.jsonl"
HISTORY_FILES = ("metrics.jsonl", PROMPTS_FILE, "rollout_groups.jsonl")


class RunFileError(OSError):
    """A file of the run's record (metrics, journal, checkpoint marker) could not be written.

    Raised instead of the bare ``OSError`` so the run stops at the first lost record, with one
    message naming the file and the errno; everything recorded before is intact and the last
    complete checkpoint resumes. Constructed like ``OSError(errno, strerror, filename)`` so it
    pickles through Ray unchanged."""

    def what(self) -> str:
        """The file and the errno: the message's first sentence (the driver's last line adds what was kept)."""
        code = errno_names.errorcode.get(self.errno, "?") if self.errno is not None else "?"
        return f"cannot write {self.filename}: errno {self.errno} ({code}: {self.strerror})"

    def __str__(self) -> str:
        return (
            f"{self.what()}. The run stopped here so that no further record is lost; fix the cause (permissions, "
            "free space) and run the same command again: it resumes from the last complete checkpoint"
        )

    @classmethod
    def of(cls, path: str, exc: OSError) -> "RunFileError":
        if isinstance(exc, cls):
            return exc
        return cls(exc.errno, exc.strerror or str(exc), os.path.abspath(path))


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``path`` so that a reader (or a restart after a kill) sees the old or the new bytes."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        # A full disk or a kill signal mid-write: leave no half-written temporary behind.
        try:
            os.remove(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise RunFileError.of(path, exc) from exc
        raise
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def append_jsonl(path: str, record: dict) -> None:
    """One ``write`` per record on an ``O_APPEND`` file: a kill leaves whole lines (or a torn last one)."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RunFileError.of(path, exc) from exc


def read_jsonl(path: str) -> list[dict]:
    """Records of a JSON-lines file; a torn or garbled line (a kill mid-write) is dropped."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path, "rb") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def trim_jsonl(path: str, max_step: int, side_file: Optional[str] = None) -> tuple[int, int]:
    """Keep the records whose ``step`` is <= ``max_step`` (atomically); returns (kept, dropped).

    The dropped lines (records of steps that will be trained again, torn lines) are appended to
    ``side_file`` first, so trimming never destroys anything."""
    if not os.path.exists(path):
        return 0, 0
    with open(path, "rb") as f:
        lines = f.read().splitlines()
    kept, dropped = [], []
    for line in lines:
        try:
            step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            step = None
        (kept if step is not None and step <= max_step else dropped).append(line + b"\n")
    if not dropped:
        return len(kept), 0
    if side_file:
        with open(side_file, "ab") as f:
            f.write(b"".join(dropped))
            f.flush()
            os.fsync(f.fileno())
    write_atomic(path, b"".join(kept))
    return len(kept), len(dropped)


def side_file_for(path: str, stamp: str) -> str:
    """``metrics.jsonl`` -> ``metrics.trimmed-20261130T142500Z.jsonl`` (same folder)."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.trimmed-{stamp}{ext}"


CHECKSUM = "sha256"  # hashlib name; OpenSSL's SHA-256 uses the CPU's SHA instructions (x86 SHA-NI, ARMv8 crypto)
CHUNK = 8 << 20


def file_checksum(path: str, algorithm: str = CHECKSUM) -> str:
    """Streamed digest of one file (8 MiB reads: constant memory whatever the shard size)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb", buffering=0) as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()
