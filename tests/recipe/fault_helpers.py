"""Drive a real recipe run in its own session and SIGKILL the whole process tree on cue.

The run is started with ``start_new_session=True``: the driver, the local Ray cluster it starts
(GCS, raylet, dashboard) and every Ray worker stay in that session (Ray workers change their
process group, not their session), so ``kill_tree`` finds exactly this run's processes by
session id -- never by name -- and SIGKILLs them all, like a machine losing power.
"""

from __future__ import annotations

import contextlib
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


def train_steps(run_dir: Path) -> list[int]:
    """The steps whose training metrics are in the run's ``metrics.jsonl`` (a row per step, in order)."""
    return [r["step"] for r in read_jsonl(Path(run_dir) / "metrics.jsonl") if "critic/score/mean" in r.get("data", {})]


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


def vllm_env(env: dict) -> dict:
    """``env`` for a ``rollout.name=vllm`` run: this interpreter's bin first (vLLM spawns ``python``), and
    none of the CPU rollout variables a shell may have exported (the run sets its own)."""
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    for key in ("VLLM_CPU_KVCACHE_SPACE", "VERL_CPU_ROLLOUT_ENV"):
        env.pop(key, None)
    return env


def session_processes(sid: int) -> list[psutil.Process]:
    """The processes of the run's session ``sid`` (the driver's PID, a session leader by ``start_new_session``).

    Never the test runner's own session, nor the runner and its ancestors: a driver that has been reaped frees
    its PID, and on a machine whose PIDs wrap (``pid_max`` 32768, some 40 Ray launches an e2e pass) a stale
    ``sid`` must not match the session that runs ``make`` and pytest.
    """
    if sid == os.getsid(0):
        return []
    keep = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in keep:
            continue
        try:
            if os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error, OSError):
            continue
    return found


def alive(sid: int) -> list[psutil.Process]:
    """The live processes of session ``sid`` (a zombie writes nothing and holds no lock)."""
    found = []
    for proc in session_processes(sid):
        try:
            if proc.pid != os.getpid() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def until_gone(run: "RecipeRun", since: float, within: float) -> tuple[list, float]:
    """Reap the driver, then poll the run's session until nothing lives (or ``within`` s after ``since``).

    Returns the ``(pid, name)`` of what is still alive then, and the seconds since ``since``."""
    run.proc.wait(timeout=120)
    while True:
        left = alive(run.sid)
        if not left or time.monotonic() - since > within:
            return [(p.pid, p.name()) for p in left], time.monotonic() - since
        time.sleep(0.1)


def process_titled(run: "RecipeRun", title: str) -> Optional[psutil.Process]:
    """The run's process whose title (Ray or vLLM set it) starts with ``title``."""
    for proc in session_processes(run.sid):
        try:
            if proc.cmdline() and proc.cmdline()[0].startswith(title):
                return proc
        except psutil.Error:
            continue
    return None


def snapshot(*roots: Path) -> dict:
    """Size and mtime of every path under ``roots``: compare two to see whether anything was written."""
    found = {}
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            stat = path.lstat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


@contextlib.contextmanager
def size_limited_tmpfs(mount: Path, size: str = "256m"):
    """Mount a tmpfs of ``size`` on ``mount`` (needs root); yields None and the reason when it cannot."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        yield f"cannot mount a size-limited tmpfs as the checkpoint folder (needs root): {done.stderr.strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Write zeros into ``folder`` until its file system refuses (ENOSPC); returns the filler file."""
    filler = Path(folder) / "filler.bin"
    block = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class RecipeRun:
    """One ``python -m verl_ascend train`` run (``verl-ascend train`` without PATH), output to ``log_path``."""

    def __init__(self, overrides: list[str], env: dict, log_path: Path, config_name: str = "dapo_tiny_cpu"):
        require_e2e("the recipe's entry point")
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "verl_ascend", "train", "--config-name", config_name, *overrides],
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
