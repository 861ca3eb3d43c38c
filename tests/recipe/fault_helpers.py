"""Drive a real recipe run in its own session and SIGKILL the whole process tree on cue.

The run is started with ``start_new_session=True``: the driver, the local Ray cluster it starts
(GCS, raylet, dashboard) and every Ray worker stay in that session (Ray workers change their
process group, not their session), so ``kill_tree`` finds exactly this run's processes by
session id -- never by name -- and SIGKILLs them all, like a machine losing power.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import psutil

from tests.launch import require_e2e
from tests.recipe.helpers import REPO


# Four prompts per step, one checkpoint per step: the shortest real steps of the tiny recipe.
SMALL_STEPS = [
    "trainer.save_freq=1",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
]


def lock_free(folder: Path) -> bool:
    """Whether a run could take ``folder``'s run lock now (tried, and released at once)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
            raise
        return False
    finally:
        os.close(fd)  # the lock goes with it


def recipe_env(tiny_dir: Path, out_dir: Path, extra: Optional[dict] = None) -> dict:
    env = {
        **os.environ,
        "VERL_ASCEND_TINY_DIR": str(tiny_dir),
        "VERL_ASCEND_OUTPUT_DIR": str(out_dir),
        "PYTHONUNBUFFERED": "1",
        **(extra or {}),
    }
    env.pop("VERL_FILE_LOGGER_PATH", None)
    env.pop("RAY_ADDRESS", None)
    return env


def session_processes(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error, OSError):
            continue
    return found


class RecipeRun:
    """One ``python -m recipe.dapo_ascend.main_dapo`` run, output to ``log_path``."""

    def __init__(self, overrides: list[str], env: dict, log_path: Path, config_name: str = "dapo_tiny_cpu"):
        require_e2e("the recipe's entry point")
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "recipe.dapo_ascend.main_dapo", "--config-name", config_name, *overrides],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.sid = self.proc.pid

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, predicate: Callable[[], object], timeout: float, poll_s: float = 0.05):
        """Poll ``predicate`` until it returns something truthy (returned) or the run ends (None)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if not self.alive():
                return predicate() or None
            time.sleep(poll_s)
        raise TimeoutError(f"condition not met within {timeout} s; log tail:\n{self.output()[-3000:]}")

    def kill_tree(self) -> int:
        """SIGKILL every process of the run's session (repeat until none is left); returns how many."""
        killed = set()
        for _ in range(50):
            procs = [p for p in session_processes(self.sid) if p.pid != os.getpid()]
            if not procs:
                break
            for proc in procs:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.add(proc.pid)
                except ProcessLookupError:
                    pass
            psutil.wait_procs(procs, timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        return len(killed)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            # A run that ended by itself still may leave Ray helpers behind for a moment.
            self.kill_tree()


def read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
