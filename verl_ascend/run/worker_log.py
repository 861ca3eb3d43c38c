"""Upstream's agent-loop workers' tracebacks about a dead actor: kept in the run folder, not on the console.

Seam row ``agent_loop_dead_actor_log``. When a rollout server dies mid-step, each of upstream's
agent-loop workers logs one full traceback per request that was in flight to it (``AgentLoopWorkerTQ.
_run_prompt`` logs every failed session with ``exc_info``): 16 tracebacks, about 550 lines, on the tiny
separate_async run, streamed by Ray to the driver's console above the one line that already names the dead
server, its pid and node (``verl_ascend.run.watchdog``). The lines say nothing that line does not, and they
push it off the screen of a 128-card job's launcher.

So in every process of a run launched by ``verl-ascend train`` (``VERL_ASCEND_RUN_DIR`` set), a logging
filter on upstream's logger appends each record whose exception is Ray's actor death to
``<run dir>/worker_errors.log`` and keeps it off stderr. Every other record, and every record when the file
cannot be written, passes unchanged. The line above the driver's last one names the file and the
count (:func:`kept_summary`; the file is appended across starts of one run folder, so the count is theirs).
Retire the row when upstream logs a dead server once per worker, not per request.

This module is also the toolkit's ``verl.plugins`` entry point (loaded at every ``import verl``): the
toolkit's own ``plugin``-stage rows must act in every process on every node, on a CPU and on an NPU
alike, so neither backend's plugin is their place. Importing it installs them (:func:`register`); each
installer returns at once in a process that is not part of a run launched by ``verl-ascend train``.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from verl_ascend.run.files import ENV_RUN_DIR

UPSTREAM_LOGGER = "verl.trainer.ppo.v1.agent_loop_tq"  # that module's logging.getLogger(__name__)
KEPT_FILE = "worker_errors.log"
_SEPARATOR = "\n" + "-" * 78 + "\n"


def actor_died(exc: Optional[BaseException]) -> bool:
    """Whether ``exc`` is (or was caused by) Ray's error for a call to an actor whose process is gone."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:
        return False
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, RayActorError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class DeadActorFilter(logging.Filter):
    """Appends records about a dead actor to ``path`` and drops them from the logger's handlers."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self._format = logging.Formatter("%(levelname)s %(asctime)s pid " + str(os.getpid()) + ": %(message)s")

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not actor_died(record.exc_info[1]):
            return True
        try:
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(self._format.format(record) + _SEPARATOR)
        except OSError:
            return True  # cannot keep it: show it
        return False


def install() -> bool:
    """Plugin-stage installer (every process): filter upstream's agent-loop logger in a launched run."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return False  # not a run of ours (upstream's own main_ppo, a test): leave upstream's logging alone
    logger = logging.getLogger(UPSTREAM_LOGGER)
    if not any(isinstance(f, DeadActorFilter) for f in logger.filters):
        logger.addFilter(DeadActorFilter(os.path.join(run_dir, KEPT_FILE)))
    return True


def kept_summary(run_dir: Optional[str]) -> str:
    """The driver's sentence about what the filter kept, or "" when it kept nothing."""
    path = os.path.join(run_dir, KEPT_FILE) if run_dir else ""
    try:
        with open(path, encoding="utf-8", errors="replace") as kept:
            count = kept.read().count(_SEPARATOR)
    except OSError:
        return ""
    if not count:
        return ""
    return (f" Upstream's agent-loop workers logged {count} traceback(s) of requests to the dead actor: kept in "
            f"{path}, not repeated here.")


def register() -> None:
    """Install the toolkit's ``plugin``-stage seam rows (idempotent; upstream imports entry points, never calls them)."""
    from verl_ascend import seams

    seams.install("plugin", owner="verl_ascend")


register()
