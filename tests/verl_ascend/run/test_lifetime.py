"""One lifetime for the driver and its cluster, without Ray: the guardian on real processes, the
signal path, the Ray start retry on a fake ``ray.init``.

The guardian is the real module in a real process, given a pipe whose write end this test holds
(this test plays the driver), a real ``flock`` on a folder, and real ``sleep`` processes with and
without this run's token.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl_ascend.run import checkpoints, cluster, faults, guardian, lifetime
from verl_ascend.run.guardian import TOKEN_ENV
from tests.recipe.fault_helpers import lock_free

TOKEN, OTHER = "a" * 32, "b" * 32


def _sleeper(token: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    if token:
        env[TOKEN_ENV] = token
    return subprocess.Popen(["sleep", "300"], env=env)


def _guardian(driver: int, read_end: int, lock_fd: int, checkpoints: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "verl_ascend.run.guardian", str(read_end), str(driver), str(checkpoints),
         "verl-ascend train x=1"],
        pass_fds=(read_end, lock_fd), env={**os.environ, TOKEN_ENV: TOKEN}, stderr=subprocess.PIPE, text=True,
    )


def _locked(run_dir: Path) -> int:
    run_dir.mkdir()
    lock_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return lock_fd


@pytest.fixture
def world(tmp_path):
    """A locked run folder, a guardian holding the lock, a run process, another run's, the user's.

    The driver is a stand-in process without children: this test's own processes are not the run's."""
    run_dir = tmp_path / "run"
    lock_fd = _locked(run_dir)
    procs = {"run": _sleeper(TOKEN), "other_run": _sleeper(OTHER), "user": _sleeper(None)}
    driver = _sleeper(None)
    read_end, write_end = os.pipe()
    keeper = _guardian(driver.pid, read_end, lock_fd, tmp_path / "ckpt")
    os.close(read_end)
    os.close(lock_fd)  # from now on only the guardian holds the lock, as after the driver's death
    yield {"run_dir": run_dir, "procs": procs, "guardian": keeper, "pipe": write_end, "driver": driver}
    for proc in [*procs.values(), driver]:
        proc.kill()
        proc.wait()
    keeper.kill()
    keeper.wait()


def test_run_processes_are_found_by_exact_token_only():
    procs = {"run": _sleeper(TOKEN), "other": _sleeper(OTHER), "prefix": _sleeper(TOKEN[:-1]), "none": _sleeper(None)}
    try:
        found = guardian.run_processes(TOKEN)
        assert procs["run"].pid in found
        assert not {procs[k].pid for k in ("other", "prefix", "none")} & set(found)
        assert procs["run"].pid not in guardian.run_processes(TOKEN, exclude=[procs["run"].pid])
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_driver_death_kills_the_run_then_frees_the_lock_and_says_how_to_resume(world):
    procs, keeper = world["procs"], world["guardian"]
    assert not lock_free(world["run_dir"])  # the guardian's copy of the descriptor holds the lock
    os.close(world["pipe"])  # the driver is gone (kill -9 closes its descriptors the same way)
    assert keeper.wait(timeout=60) == 0
    assert procs["run"].wait(timeout=5) == -signal.SIGKILL  # dead by the time the guardian exits
    assert lock_free(world["run_dir"])
    assert procs["other_run"].poll() is None and procs["user"].poll() is None  # never touched
    message = keeper.stderr.read().strip().splitlines()[-1]
    assert f"the driver (PID {world['driver'].pid}) ended without stopping its run: its 1 Ray processes were killed" \
        in message
    assert "Kept: no complete checkpoint yet, so a rerun starts from step 1" in message
    assert message.endswith(". To resume from it, run the same command again: verl-ascend train x=1")


def test_a_clean_end_removes_stragglers_silently(world):
    procs, keeper = world["procs"], world["guardian"]
    os.write(world["pipe"], guardian.CLEAN_EXIT)
    os.close(world["pipe"])
    assert keeper.wait(timeout=60) == 0
    assert procs["run"].wait(timeout=5) == -signal.SIGKILL
    assert keeper.stderr.read() == ""
    assert procs["other_run"].poll() is None and procs["user"].poll() is None


# A Ray agent's shape: a child of the driver's tree, started with the token and a long command line,
# that sets a short title (setproctitle) -- which writes over the memory /proc/PID/environ shows.
AGENT_CHILD = "\n".join([
    "import setproctitle, time",
    "setproctitle.setproctitle('ray::DashboardAgent')",
    "print('titled', flush=True)",
    "time.sleep(300)",
])
AGENT_DRIVER = "\n".join([
    "import subprocess, sys, time",
    f"subprocess.Popen([sys.executable, '-c', {AGENT_CHILD!r}, '--long-flag=' + 'x' * 4000])",
    "time.sleep(300)",
])


def test_a_process_whose_title_hid_the_token_is_found_through_the_drivers_tree(tmp_path):
    """CI saw it: Ray's DashboardAgent and RuntimeEnvAgent outlived a ``kill -9`` of the driver, their token gone
    from ``/proc/PID/environ`` under their title. What the driver's tree held while it lived goes too."""
    lock_fd = _locked(tmp_path / "run")
    bystander = _sleeper(None)  # this test's child, not the driver's: never touched
    driver = subprocess.Popen([sys.executable, "-c", AGENT_DRIVER], env={**os.environ, TOKEN_ENV: TOKEN},
                              stdout=subprocess.PIPE, text=True)
    keeper = None
    try:
        assert driver.stdout.readline().strip() == "titled"
        [agent] = guardian.descendants(driver.pid, guardian.process_table())
        assert agent not in guardian.run_processes(TOKEN)  # the token is gone where /proc shows it
        read_end, write_end = os.pipe()
        keeper = _guardian(driver.pid, read_end, lock_fd, tmp_path / "ckpt")
        os.close(read_end)
        os.close(lock_fd)
        time.sleep(10 * guardian.TREE_POLL_S)  # the guardian reads the tree at start and every TREE_POLL_S
        driver.kill()  # SIGKILL: the agent is now an orphan, outside any tree walk from the driver
        driver.wait()
        os.close(write_end)
        assert keeper.wait(timeout=60) == 0
        assert _gone(agent)
        assert "its 1 Ray processes were killed" in keeper.stderr.read()
        assert bystander.poll() is None
        assert lock_free(tmp_path / "run")
    finally:
        for proc in (bystander, driver, keeper):
            if proc is not None:
                proc.kill()
                proc.wait()


def _gone(pid: int) -> bool:
    """Dead or a zombie (an orphan's zombie waits for whoever reaps orphans here)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True


def test_the_tree_is_the_drivers_descendants_with_their_start_times():
    table = {10: (1, 100), 11: (10, 110), 12: (11, 120), 13: (1, 130), 14: (13, 140)}
    assert guardian.descendants(10, table) == {11: 110, 12: 120}
    assert guardian.descendants(12, table) == {}


def test_a_reused_pid_is_not_the_process_the_tree_saw(monkeypatch):
    tree = guardian.Tree(driver=10)
    monkeypatch.setattr(guardian, "process_table", lambda: {10: (1, 100), 11: (10, 110), 12: (10, 120)})
    tree.read()
    monkeypatch.setattr(guardian, "process_table", lambda: {11: (1, 110), 12: (1, 999)})  # 12: another process now
    assert tree.alive() == [11]
    monkeypatch.setattr(guardian, "process_table", lambda: {10: (1, 100), 11: (1, 110), 13: (10, 130)})
    tree.read()  # 12 is gone: forgotten; 13 is new: seen
    assert tree.seen == {11: 110, 13: 130}


def test_stop_run_keeps_killing_until_nothing_is_left():
    alive = {11: 3, 12: 1}  # pid -> kills it survives (a process in uninterruptible sleep, say)
    born = [13]  # a worker the raylet starts while the first ones die
    kills = []

    def find():
        return sorted(alive)

    def kill(pid):
        kills.append(pid)
        alive[pid] -= 1
        if alive[pid] < 0:
            del alive[pid]
        if born:
            alive[born.pop()] = 0

    killed = guardian.stop_run(find, kill, pause=lambda s: None)
    assert killed == {11, 12, 13} and not alive
    assert kills.count(11) == 4 and kills.count(12) == 2 and kills.count(13) == 1


def test_kept_names_the_newest_marked_checkpoint_in_the_failures_wording(tmp_path):
    root = tmp_path / "ckpt"
    for step in (1, 2, 3):
        (root / f"global_step_{step}").mkdir(parents=True)
        (root / f"global_step_{step}" / "data.pt").write_bytes(b"x" * step)
    for step in (1, 2):
        checkpoints.write_marker(str(root / f"global_step_{step}"), step)
    said = lifetime.kept_and_resume(str(root), "python -m x")
    assert said == (f"Kept: {root}/global_step_2 (step 2, the last complete checkpoint); global_step_3: no "
                    f"{checkpoints.MARKER}, never resumed (a rerun quarantines it). To resume from it, run the same "
                    "command again: python -m x")
    failed = faults.kept_and_resume(faults.RunSite(str(root), "", command="python -m x"))
    assert failed == said.replace("To resume from it, run", "To resume from it, fix the cause and run")


def test_a_dead_driver_with_steps_recorded_but_no_checkpoint_names_start_over(tmp_path):
    from verl_ascend.run import guardian

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "data": {}}\n{"step": 2, "data": {}}\n')
    said = guardian.died_message(41, 3, 0.5, str(tmp_path / "ckpt"), "verl-ascend train", str(run_dir))
    assert "only the records of the steps trained (metrics.jsonl up to step 2)" in said
    assert said.endswith("run the same command with fault_tolerance.start_over=true: verl-ascend train")
    assert lifetime.kept_and_resume(str(tmp_path / "ckpt"), "c").endswith("run the same command again: c")  # no folder known


def test_sigterm_stops_at_once_with_143_and_the_resume_line(tmp_path, monkeypatch):
    root = tmp_path / "ckpt" / "global_step_4"
    root.mkdir(parents=True)
    (root / "data.pt").write_bytes(b"w")
    checkpoints.write_marker(str(root), 4)
    monkeypatch.setattr(lifetime._Stop, "signum", None)
    monkeypatch.setattr(lifetime.Guardian, "current", None)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        lifetime.install_stop_handlers()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # interrupted by the handler at once
        os.kill(os.getpid(), signal.SIGINT)  # a second signal during the teardown is ignored
        end = lifetime.stopped(str(tmp_path / "ckpt"))
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert end.code == 143
    assert end.message.startswith("[verl-ascend] stopped by SIGTERM: the run stopped at once")
    assert f"Kept: {root} (step 4, the last complete checkpoint). " in end.message
    assert end.message.endswith(f"To resume from it, run the same command again: {faults.rerun_command()}")


def test_after_ray_init_runs_the_hook_before_the_actor_is_created():
    calls = []

    class Actor:
        @staticmethod
        def remote(*args):
            calls.append(("remote", args))
            return "handle"

        @staticmethod
        def options(**kwargs):
            calls.append(("options", kwargs))
            return Actor

    runner = lifetime.after_ray_init(Actor, lambda: calls.append("hook"))
    assert runner.remote(1) == "handle"
    assert runner.options(runtime_env={}) is Actor
    assert calls == ["hook", ("remote", (1,)), "hook", ("options", {"runtime_env": {}})]


# ----------------------------------------------------------------------------- Ray start retry
TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the Ray processes failed")


class FakeInit:
    def __init__(self, failures: int, error: Exception = TIMEOUT):
        self.failures, self.error, self.calls, self.shutdowns, self.pauses = failures, error, 0, 0, []

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ray context"

    def start(self, **kwargs):
        return cluster.start_ray(self, pause=self.pauses.append, shutdown=self.shutdown, **kwargs)

    def shutdown(self):
        self.shutdowns += 1


def test_start_up_timeouts_are_retried_after_a_shutdown():
    init = FakeInit(failures=2)
    assert init.start() == "ray context"
    assert (init.calls, init.shutdowns, init.pauses) == (3, 2, [5, 10])


def test_a_start_that_keeps_timing_out_ends_with_one_message():
    init = FakeInit(failures=10)
    with pytest.raises(lifetime.RunEnded) as raised:
        init.start()
    assert (init.calls, init.shutdowns) == (cluster.START_ATTEMPTS, cluster.START_ATTEMPTS)
    assert raised.value.code == 1
    message = raised.value.message
    assert "Ray's local node did not start within Ray's fixed start-up wait, 3 attempts" in message
    assert "timed out during startup" in message and "load average" in message
    assert "\n" not in message and message.endswith(faults.rerun_command())


def test_other_failures_and_failures_after_the_start_are_not_retried():
    other = FakeInit(failures=1, error=ValueError("num_cpus must be an int"))
    with pytest.raises(ValueError, match="num_cpus"):
        other.start()
    late = FakeInit(failures=1)  # e.g. run_ppo's own ray.init succeeded, the failure came later
    with pytest.raises(Exception, match="timed out during startup"):
        late.start(reached=lambda: True)
    assert (other.calls, other.shutdowns, late.calls, late.shutdowns) == (1, 0, 1, 0)


def test_a_rerun_while_the_guardian_still_holds_the_lock_is_told_to_retry(tmp_path):
    """The lock outlives its driver while the guardian stops the run: the refusal says so."""
    from verl_ascend.run.run_guard import RunLock

    folder = tmp_path / "run"
    folder.mkdir()
    driver = subprocess.run(  # locks, records itself as owner, leaves a holder of the descriptor, ends
        [sys.executable, "-c", (
            "import fcntl, json, os, socket, subprocess, sys\n"
            f"fd = os.open({str(folder)!r}, os.O_RDONLY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "owner = {'pid': os.getpid(), 'host': socket.gethostname(), 'time': 0}\n"
            f"json.dump(owner, open({str(folder / 'owner.json')!r}, 'w'))\n"
            "print(subprocess.Popen(['sleep', '300'], pass_fds=(fd,), stdout=-3, stderr=-3).pid)\n"
        )], capture_output=True, text=True, check=True,
    )
    holder = int(driver.stdout.strip())
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        said = RunLock.describe_holder(str(folder), fd)
        os.kill(holder, signal.SIGKILL)
    finally:
        os.close(fd)
    assert said.endswith("its guardian holds the lock until the run's last processes are gone: retry in a few seconds")
    (folder / "owner.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": 0}))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the killed holder's descriptor is closed
    try:
        said = RunLock.describe_holder(str(folder), fd)
    finally:
        os.close(fd)
    assert said.startswith(f"PID {os.getpid()} on host") and "retry" not in said  # a live driver: no such note
