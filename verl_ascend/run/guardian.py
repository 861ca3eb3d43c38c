"""The run's guardian: a tiny process that outlives the driver just long enough to take its cluster down.

``python -m verl_ascend.run.guardian PIPE_FD DRIVER_PID CHECKPOINTS COMMAND`` is started by the
driver (:mod:`verl_ascend.run.lifetime`) before Ray. It holds

* a copy of the run lock's descriptors: an ``flock`` belongs to the open file, so the run folder
  stays locked while the guardian lives, whatever happened to the driver;
* the read end of a pipe whose only write end is the driver's: end of file means the driver is
  gone, by any signal, ``kill -9`` included.

On end of file it SIGKILLs every process of the run -- those whose environment holds this run's
``VERL_ASCEND_RUN_TOKEN``, which the driver sets before Ray starts and every process Ray starts
inherits (GCS, raylet, dashboard and its agents, workers, what the workers spawn) -- until none is
left, and only then exits, releasing the lock. Processes are never found by name, and a
process of another run (another token) or of a cluster this run only joined (started by
``ray start``, without the token) is never touched. A driver that ends on purpose writes ``q``
first: the guardian then removes stragglers silently; otherwise it prints what happened, what
was kept and how to resume. Only the standard library is imported before the driver is gone.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable, Iterable

TOKEN_ENV = "VERL_ASCEND_RUN_TOKEN"
CLEAN_EXIT = b"q"  # written by a driver that tears its run down itself
POLL_S = 0.02


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


def died_message(driver: int, killed: int, seconds: float, checkpoints: str, command: str) -> str:
    from verl_ascend.run.faults import RunSite, kept_and_resume  # not lifetime: it imports this module

    then = kept_and_resume(RunSite(checkpoints, "", command=command), cause=False)
    return (
        f"[verl-ascend] the driver (PID {driver}) ended without stopping its run: its {killed} Ray processes were "
        f"killed within {seconds:.1f} s and the run folder is free. {then}"
    )


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # only the driver's end ends the guardian
        signal.signal(sig, signal.SIG_IGN)
    pipe, driver, checkpoints, command = int(argv[0]), int(argv[1]), argv[2], argv[3]
    token = os.environ[TOKEN_ENV]
    said = b""
    while True:
        chunk = os.read(pipe, 64)
        if not chunk:
            break
        said += chunk
    started = time.monotonic()
    killed = stop_run(lambda: run_processes(token, exclude=(os.getpid(), driver)))
    if CLEAN_EXIT not in said:
        print(died_message(driver, len(killed), time.monotonic() - started, checkpoints, command),
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
