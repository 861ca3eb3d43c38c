"""The run's guardian: a tiny process that outlives the driver just long enough to take its cluster down.

``python -m verl_ascend.run.guardian PIPE_FD DRIVER_PID CHECKPOINTS COMMAND`` is started by the
driver (:mod:`verl_ascend.run.lifetime`) before Ray. It holds

* a copy of the run lock's descriptors: an ``flock`` belongs to the open file, so the run folder
  stays locked while the guardian lives, whatever happened to the driver;
* the read end of a pipe whose only write end is the driver's: end of file means the driver is
  gone, by any signal, ``kill -9`` included.

On end of file it SIGKILLs every process of the run until none is left, and only then exits,
releasing the lock. A process of the run is found two ways, because neither alone is enough:

* its environment holds this run's ``VERL_ASCEND_RUN_TOKEN``, which the driver sets before Ray
  starts and every process Ray starts inherits. But ``/proc/PID/environ`` shows the memory the
  environment was first placed in, and a process that sets a long title (Ray's
  ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent`` do) writes the title over it: there the
  token is gone;
* it was seen in the driver's process tree while the driver lived (the guardian reads the tree
  at start and every ``TREE_POLL_S``), and it is still the same process (same start time, so a
  reused PID is never killed). Ray's processes are the driver's descendants until it dies; its
  agents then become orphans, which no tree walk after the death could find.

Processes are never found by name, and a process of another run (another token, another tree)
or of a cluster this run only joined (started by ``ray start``: neither token nor tree) is never
touched. A driver that ends on purpose writes ``q`` first: the guardian then removes stragglers
silently; otherwise it prints what happened, what was kept and how to resume. Only the standard
library is imported before the driver is gone.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import Callable, Iterable

TOKEN_ENV = "VERL_ASCEND_RUN_TOKEN"
CLEAN_EXIT = b"q"  # written by a driver that tears its run down itself
POLL_S = 0.02
TREE_POLL_S = 0.25  # how often the driver's process tree is read while it lives


def _environ(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:  # gone, a zombie, or another user's process
        return b""


def run_processes(token: str, exclude: Iterable[int] = ()) -> list[int]:
    """PIDs of the live processes whose environment holds ``VERL_ASCEND_RUN_TOKEN=token`` exactly."""
    entry = f"{TOKEN_ENV}={token}".encode()
    skip = {int(p) for p in exclude}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in skip and entry in _environ(name).split(b"\0"):
            found.append(int(name))
    return found


def _stat(pid: str) -> tuple[int, int] | None:
    """``(parent PID, start time in clock ticks)`` of a live process, from ``/proc/PID/stat``.

    A zombie counts as gone: it cannot write, and SIGKILL cannot remove it (only its parent's wait)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the name in parentheses may hold spaces
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[19])


def process_table() -> dict[int, tuple[int, int]]:
    """Every live process: PID -> ``(parent PID, start time)``."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(name)) is not None:
            table[int(name)] = stat
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> dict[int, int]:
    """The processes below ``root`` in ``table``: PID -> start time (``root`` itself not included)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = table[pid][1]
            todo.extend(children.get(pid, ()))
    return found


class Tree:
    """The driver's descendants as seen while it lived; :meth:`alive` says which are still those processes."""

    def __init__(self, driver: int, skip: Iterable[int] = ()):
        self.driver, self.skip, self.seen = driver, set(skip), {}

    def read(self) -> None:
        """Add the driver's descendants now; forget those seen before that are gone (a run of days
        spawns many short-lived processes)."""
        table = process_table()
        self.seen = {pid: start for pid, start in self.seen.items() if _same(table, pid, start)}
        for pid, start in descendants(self.driver, table).items():
            if pid not in self.skip:
                self.seen[pid] = start

    def alive(self) -> list[int]:
        table = process_table()
        return [pid for pid, start in self.seen.items() if _same(table, pid, start)]


def _same(table: dict[int, tuple[int, int]], pid: int, start: int) -> bool:
    """``pid`` is still the process that started at ``start`` (not gone, not a reused PID)."""
    return pid in table and table[pid][1] == start


def wait_for_end(pipe: int, tree: Tree) -> bytes:
    """Read the pipe to its end (the driver is gone), reading the driver's tree meanwhile; what was written."""
    said = b""
    tree.read()
    while True:
        ready, _, _ = select.select([pipe], [], [], TREE_POLL_S)
        if not ready:
            tree.read()
            continue
        chunk = os.read(pipe, 64)
        if not chunk:
            return said
        said += chunk


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_run(
    find: Callable[[], list[int]], kill: Callable[[int], None] = _kill, pause: Callable[[float], None] = time.sleep
) -> set[int]:
    """SIGKILL what ``find`` returns until it returns nothing (new processes included); the PIDs killed.

    No time limit: the lock must stay held while any process of the run can still write.
    """
    killed: set[int] = set()
    while True:
        pids = find()
        if not pids:
            return killed
        for pid in pids:
            kill(pid)
        killed.update(pids)
        pause(POLL_S)


def died_message(driver: int, killed: int, seconds: float, checkpoints: str, command: str, run_dir: str = "") -> str:
    from verl_ascend.run.faults import RunSite, kept_and_resume  # not lifetime: it imports this module

    then = kept_and_resume(RunSite(checkpoints, run_dir, command=command), cause=False)
    return (
        f"[verl-ascend] the driver (PID {driver}) ended without stopping its run: its {killed} Ray processes were "
        f"killed within {seconds:.1f} s and the run folder is free. {then}"
    )


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # only the driver's end ends the guardian
        signal.signal(sig, signal.SIG_IGN)
    pipe, driver, checkpoints, command = int(argv[0]), int(argv[1]), argv[2], argv[3]
    run_dir = argv[4] if len(argv) > 4 else ""  # its history decides whether the same command resumes
    token, me = os.environ[TOKEN_ENV], os.getpid()
    tree = Tree(driver, skip=(me,))
    said = wait_for_end(pipe, tree)
    started = time.monotonic()
    killed = stop_run(lambda: sorted({*run_processes(token, exclude=(me, driver)), *tree.alive()}))
    if CLEAN_EXIT not in said:
        print(died_message(driver, len(killed), time.monotonic() - started, checkpoints, command, run_dir),
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
