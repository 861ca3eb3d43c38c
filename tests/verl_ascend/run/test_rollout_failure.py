"""A rollout server that dies (or wedges) mid-generation fails the step with a clear error -- never a hang.

- End to end: the tiny CPU recipe's ``hf`` rollout server process is SIGKILLed while step 1 is
  generating; the run must exit non-zero, naming the dead server and the step.
- The watchdog on toy Ray actors: a killed actor is reported at the next poll; a stopped one
  (SIGSTOP: alive, silent) fails the wait after ``rollout_timeout_s`` without progress, and the
  error lists the silent server; progress resets the clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import psutil
import pytest

from verl_ascend.run import faults, files
from verl_ascend.run.watchdog import RolloutServerDiedError, RolloutStalledError, RolloutWatchdog
from tests.launch import start_local_ray
from tests.recipe.fault_helpers import RecipeRun, read_json, recipe_env, session_processes

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)


# ----------------------------------------------------------------------------- toy cluster
@pytest.fixture(scope="module")
def ray_local():
    import ray

    start_local_ray(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeReplayBuffer:
    """The attributes the watchdog reads from upstream's ``ReplayBuffer`` (per partition)."""

    def __init__(self):
        self.pending_keys = defaultdict(set)
        self.running_keys = defaultdict(set)
        self.finished_keys = defaultdict(set)
        self.failure_keys = defaultdict(set)
        self.partitions = defaultdict(dict)
        self.polls = 0

    def _wait_for_next_poll(self, partition_id, last_debug_time):
        self.polls += 1
        return last_debug_time

    def sample(self, global_steps, partition_id, batch_size):
        return None


def _server_actor(ray):
    @ray.remote(num_cpus=0)
    class Server:
        def pid(self):
            return os.getpid()

    handle = Server.remote()
    return handle, ray.get(handle.pid.remote())


def test_dead_server_is_reported_at_the_next_poll(ray_local):
    handle, pid = _server_actor(ray_local)
    rb = FakeReplayBuffer()
    rb.running_keys["train"] = {"a", "b"}
    dog = RolloutWatchdog(lambda: [("replica 0 (hf-replica-0)", handle)], rollout_timeout_s=600, ping_timeout_s=60)
    dog.begin(7, "train")
    dog.check(rb, "train")  # alive: nothing happens
    os.kill(pid, signal.SIGKILL)
    psutil.Process(pid).wait(timeout=30)
    with pytest.raises(RolloutServerDiedError) as info:
        # Poll like the replay buffer does (every 0.2 s); pings are throttled to one per
        # PING_INTERVAL_S per live server, so the death shows within a few seconds of polling.
        for _ in range(600):
            dog.check(rb, "train")
            time.sleep(0.2)
    message = str(info.value)
    assert "step 7" in message and "replica 0 (hf-replica-0)" in message and "died during generation" in message
    assert f"[Ray actor Server (pid {pid}, node " in message  # from Ray's ActorDiedError text
    assert "running 2" in message


def test_engine_death_behind_a_live_server_names_the_engine_process(ray_local):
    class ToyEngine:  # local: pickled by value into the actor
        """Stands in for vLLM's ``AsyncLLM`` in a server actor: an engine process of its own, and
        ``errored`` once that process exited (what vLLM's monitor thread does for the engine core)."""

        def __init__(self):
            self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

        @property
        def errored(self) -> bool:
            return self.proc.poll() is not None

    @ray_local.remote(num_cpus=0)
    class EngineServer:
        def __init__(self):
            self.engine = ToyEngine()

        def pids(self):
            return os.getpid(), self.engine.proc.pid

    handle = EngineServer.remote()
    server_pid, engine_pid = ray_local.get(handle.pids.remote())
    rb = FakeReplayBuffer()
    dog = RolloutWatchdog(lambda: [("replica 0 (10.0.0.7:8000)", handle)], rollout_timeout_s=600, ping_timeout_s=60)
    dog.begin(4, "train")
    dog.poll_servers(wait_s=30, force=True)  # healthy: its engine process is recorded
    os.kill(engine_pid, signal.SIGKILL)
    with pytest.raises(RolloutServerDiedError) as info:
        for _ in range(600):
            dog.check(rb, "train")
            time.sleep(0.2)
    assert psutil.pid_exists(server_pid)  # the server actor itself lives on
    message = str(info.value)
    assert f"step 4: rollout server died during generation: replica 0 (10.0.0.7:8000) [engine process " in message
    assert f"(pid {engine_pid}) died; the server actor (pid {server_pid}) is alive, its engine reports dead]" in message
    ray_local.kill(handle)


def test_stalled_rollout_fails_after_the_timeout_and_names_the_silent_server(ray_local):
    handle, pid = _server_actor(ray_local)
    clock = FakeClock()
    rb = FakeReplayBuffer()
    rb.running_keys["train"] = {"a"}
    dog = RolloutWatchdog(lambda: [("replica 0", handle)], rollout_timeout_s=30, ping_timeout_s=5, clock=clock)
    os.kill(pid, signal.SIGSTOP)  # alive to Ray, answers nothing: a wedged server
    try:
        dog.attach(rb)
        dog.begin(3, "train")
        rb._wait_for_next_poll("train", 0.0)  # first poll: records the state
        clock.now += 20
        rb.finished_keys["train"] = {"a"}  # progress: the clock restarts
        rb._wait_for_next_poll("train", 0.0)
        clock.now += 29
        rb._wait_for_next_poll("train", 0.0)  # 29 s without progress: still waiting
        clock.now += 2
        with pytest.raises(RolloutStalledError) as info:
            rb._wait_for_next_poll("train", 0.0)
        message = str(info.value)
        assert "step 3: no rollout progress for 31 s" in message
        assert "fault_tolerance.rollout_timeout_s=30" in message
        assert "replica 0 (silent 51 s)" in message  # pinged at the first poll, never answered
        assert rb.polls == 3  # the failing poll never reached upstream's sleep
    finally:
        os.kill(pid, signal.SIGKILL)


def test_sample_failure_is_explained_by_the_dead_server(ray_local):
    """Upstream's own error (all groups failed) is re-raised as the server death that caused it."""
    handle, pid = _server_actor(ray_local)
    rb = FakeReplayBuffer()

    def sample(global_steps, partition_id, batch_size):
        os.kill(pid, signal.SIGKILL)
        raise RuntimeError("Sync replay buffer selected terminal groups with no materializable trajectories.")

    rb.sample = sample
    dog = RolloutWatchdog(lambda: [("replica 0", handle)], rollout_timeout_s=600, ping_timeout_s=60)
    dog.attach(rb)
    with pytest.raises(RolloutServerDiedError) as info:
        rb.sample(global_steps=2, partition_id="train", batch_size=4)
    assert "step 2" in str(info.value)
    assert "no materializable trajectories" in str(info.value.__cause__)


# ----------------------------------------------------------------------------- the real recipe
def _server_process(run: RecipeRun):
    for proc in session_processes(run.sid):
        try:
            if proc.cmdline() and proc.cmdline()[0].startswith("ray::HFRolloutServer"):
                return proc
        except psutil.Error:
            continue
    return None


def test_recipe_step_fails_clearly_when_the_rollout_server_dies(tiny_dir, tmp_path):
    out = tmp_path / "out"
    run_dir = out / "dapo_tiny_cpu"
    env = recipe_env(tiny_dir, out)
    run = RecipeRun(["trainer.total_training_steps=2", "fault_tolerance.rollout_timeout_s=120"], env, tmp_path / "run.log")
    try:
        status = run.wait_for(
            lambda: (s := read_json(run_dir / files.STATUS_FILE) or {}).get("phase") == "rollout" and s,
            timeout=600,
            poll_s=0.02,
        )
        assert status and status["step"] == 1, run.output()[-3000:]
        server = _server_process(run)
        assert server is not None, "no ray::HFRolloutServer process in the run's session"
        pid = server.pid
        server.kill()
        # The run must end on its own (the watchdog), well before the stall timeout would.
        rc = run.proc.wait(timeout=300)
    finally:
        run.kill_tree()
    text = run.output()
    assert rc == 1
    last = [line for line in text.splitlines() if line.strip()][-1]  # the driver's one line, no traceback after it
    assert last.startswith("[verl-ascend] error: step 1: rollout server died during generation: replica 0 "
                           "(hf-replica-0) [Ray actor HFRolloutServer ("), text[-4000:]
    assert f"pid {pid}, node " in last and "died: its process ended without a word: killed by a signal" in last, last
    prefix = faults.assignments(faults.ours_set(env))  # the variables of ours the run was given, repeated
    # step 1's prompts are recorded and no checkpoint is complete: a plain rerun would be refused (run_guard)
    assert "A rerun trains from step 1 and needs fault_tolerance.start_over=true" in last, last
    assert f"run the same command with fault_tolerance.start_over=true: {prefix} python -m verl_ascend train" in last
    metrics = run_dir / "metrics.jsonl"
    assert not metrics.exists() or metrics.read_text() == ""  # the failed step logged nothing
    # upstream's agent-loop tracebacks about the dead server stay off the console, kept in the run folder
    assert "ActorDiedError" not in text, text[-6000:]
    kept = run_dir / "worker_errors.log"
    if kept.exists():
        assert "ActorDiedError" in kept.read_text()
        assert f"kept in {kept}, not repeated here." in text.splitlines()[-2], text[-2000:]
