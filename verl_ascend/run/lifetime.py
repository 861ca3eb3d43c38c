"""One lifetime for the driver and the Ray cluster it starts.

- **The driver dies, the run dies** (:class:`Guardian`): before Ray starts, the driver gives
  every process of the run a token (``VERL_ASCEND_RUN_TOKEN``, inherited by all Ray starts) and
  starts :mod:`verl_ascend.run.guardian`, which holds the run lock with it and, when the driver is
  gone by any signal (``kill -9`` included), kills every process carrying the token or seen in the
  driver's process tree while it lived, then exits, releasing the lock. A rerun can never take the
  folder while an old worker may still write in it.
- **SIGTERM / SIGINT stop the run at once** (:func:`install_stop_handlers`): the step in flight is
  abandoned (its checkpoints, written only at a step's end and proven whole on resume, are not at
  risk), the cluster is shut down, and the driver exits 128 + the signal number with one last line
  naming the last complete checkpoint and the command that resumes. Ray's ``ray.init`` installs
  its own SIGTERM handling (``sys.exit`` plus a C++ stack dump, then ``abort``); the handlers here
  are installed again after every ``ray.init`` (:func:`after_ray_init`).

Seam ``driver_lifetime_after_ray_init``: SIGTERM to the driver used to end in a C++ stack dump and abort (exit
134) with the cluster left to Ray. ``run_ppo`` offers no hook after its ``ray.init`` but the task-runner class
it creates; and Ray's fixed 30 s node wait fails on a busy machine before anything of the run exists, so
``verl_ascend.run.cluster.start_ray`` retries ``run_ppo``'s ``ray.init`` (its first act) whole. Goes when
``run_ppo`` stops cleanly on SIGTERM and Ray retries a node that misses its start-up wait.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import subprocess
import sys
import threading
from typing import Callable, Optional

from verl_ascend.run.faults import rerun_command
from verl_ascend.run.guardian import CLEAN_EXIT, TOKEN_ENV

GUARDIAN_WAIT_S = 60  # a clean end waits this long for the guardian to confirm nothing of the run is left


class RunEnded(BaseException):
    """The run ends here with ``message`` as its last line and ``code`` as the exit status.

    A ``BaseException``: it must pass upstream's and our ``except Exception`` on its way to the entry point.
    """

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.message, self.code = message, code


def kept_and_resume(checkpoints: str, command: str, run_dir: str = "") -> str:
    """What a stopped run kept and how to resume it: ``faults.kept_and_resume``'s text (one wording for every end)."""
    from verl_ascend.run.faults import RunSite
    from verl_ascend.run.faults import kept_and_resume as text

    return text(RunSite(checkpoints, run_dir, command=command), cause=False)


class Guardian:
    """The driver's side of :mod:`verl_ascend.run.guardian`."""

    current: Optional["Guardian"] = None

    def __init__(self, lock_fds: list[int], checkpoints: str, run_dir: str = ""):
        os.environ[TOKEN_ENV] = secrets.token_hex(16)  # fresh per run, whatever the shell exported
        read_end, self._write_end = os.pipe()  # not inheritable: only the guardian gets the read end
        args = [str(read_end), str(os.getpid()), checkpoints, rerun_command(), run_dir]
        with _signals_ignored():  # inherited through exec: the guardian ignores them from its first instruction
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "verl_ascend.run.guardian", *args],
                pass_fds=(read_end, *lock_fds),
                stdin=subprocess.DEVNULL,
            )
        os.close(read_end)
        atexit.register(self.finish)  # before ray.init: runs after Ray's own atexit shutdown

    @classmethod
    def start(cls, lock_fds: list[int], checkpoints: str, run_dir: str = "") -> "Guardian":
        if cls.current is None:
            cls.current = cls(lock_fds, checkpoints, run_dir)
        return cls.current

    def finish(self) -> None:
        """Ray is shut down: let the guardian remove stragglers and wait until it is done (idempotent)."""
        if self._write_end is None:
            return
        try:
            os.write(self._write_end, CLEAN_EXIT)
        finally:
            os.close(self._write_end)
            self._write_end = None
        try:
            self.proc.wait(timeout=GUARDIAN_WAIT_S)
        except subprocess.TimeoutExpired:
            print(f"[verl-ascend] the run's guardian (PID {self.proc.pid}) is still stopping its processes; the "
                  "run folder stays locked until it is done", file=sys.stderr, flush=True)


class _signals_ignored:
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __enter__(self):
        self.saved = [signal.signal(s, signal.SIG_IGN) for s in self.SIGNALS]

    def __exit__(self, *exc):
        for sig, handler in zip(self.SIGNALS, self.saved):
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------- SIGTERM / SIGINT
class _Stop:
    signum: Optional[int] = None


class StopRequested(KeyboardInterrupt):
    """Raised in the main thread by the first SIGTERM/SIGINT. A ``KeyboardInterrupt``: Ray's blocking
    calls turn any other exception from a signal handler into a ``SystemError``."""


def _on_signal(signum, frame) -> None:
    if _Stop.signum is not None:
        return  # the teardown of the first is under way
    _Stop.signum = signum
    raise StopRequested(signal.Signals(signum).name)


def install_stop_handlers() -> None:
    """SIGTERM and SIGINT stop the run at once (main thread only; Python's rule for handlers)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _on_signal)


def stopped(checkpoints: str, run_dir: str = "") -> RunEnded:
    """The run was interrupted (``KeyboardInterrupt``): shut the cluster down, say what was kept."""
    import ray

    signum = _Stop.signum or signal.SIGINT  # a KeyboardInterrupt without our handler: Ctrl-C
    if ray.is_initialized():
        ray.shutdown()
    if Guardian.current is not None:
        Guardian.current.finish()
    name = signal.Signals(signum).name
    return RunEnded(
        f"[verl-ascend] stopped by {name}: the run stopped at once (the step in flight is abandoned) and its Ray "
        f"processes are gone. {kept_and_resume(checkpoints, rerun_command(), run_dir)}",
        128 + int(signum),
    )


class after_ray_init:
    """``task_runner_class`` for upstream's ``run_ppo``: the actor class, with ``hook()`` run first.

    ``run_ppo`` calls ``task_runner_class.remote()`` (or ``.options(...)``) in the driver right after
    its ``ray.init``: the first moment this driver can replace Ray's signal handling.
    """

    def __init__(self, actor_class, hook: Callable[[], None]):
        self.actor_class, self.hook = actor_class, hook

    def remote(self, *args, **kwargs):
        self.hook()
        return self.actor_class.remote(*args, **kwargs)

    def options(self, *args, **kwargs):
        self.hook()
        return self.actor_class.options(*args, **kwargs)
