"""Runtime faults injected into real tiny runs end in one last line: the fault, what was kept, how to resume.

- Disk full during a save: ``trainer.default_local_dir`` is a size-limited tmpfs (mounted here,
  as root) that the test fills once step 1's checkpoint is marked; step 2's save fails inside
  torch's writer (which hides the errno). The last line says "no space left on device" naming the
  folder being saved, keeps step 1, and the same command, run again on a freed disk, quarantines
  the half-written step-2 folder and resumes after step 1.
- A training worker SIGKILLed mid-update: the line names the Ray actor, its pid and the signal.
- vLLM's engine-core process SIGKILLed behind its live server actor (``rollout.name=vllm``): the
  watchdog names the replica and the engine process by pid.
- Ray's memory monitor on a toy cluster started with ``RAY_memory_usage_threshold`` far below the
  node's use: the real ``OutOfMemoryError`` Ray raises is named with the variable to change.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch import require_e2e
from tests.recipe.fault_helpers import (
    RecipeRun, fill, last_line, process_titled, read_json, read_jsonl, recipe_env, size_limited_tmpfs, vllm_env,
)
from verl_ascend.run import checkpoints, faults, files

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)

OVERRIDES = [
    "trainer.total_training_steps=3",
    "trainer.save_freq=1",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
]
START_TIMEOUT = 600  # start-up on a loaded 2-core machine
COMMAND = "python -m verl_ascend train --config-name dapo_tiny_cpu"  # what tests/recipe/fault_helpers.py starts


def _status(run_dir: Path) -> dict:
    return read_json(run_dir / files.STATUS_FILE) or {}


def _assert_one_clear_line(text: str, rc: int) -> str:
    last = last_line(text)
    assert rc == 1, text[-4000:]
    assert last.startswith("[verl-ascend] error: "), text[-4000:]
    return last


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "checkpoints"
    with size_limited_tmpfs(mount) as cannot:
        if cannot:
            pytest.skip(cannot)
        yield mount


def test_disk_full_during_a_save_names_the_folder_and_the_rerun_resumes_the_last_whole_checkpoint(tiny_dir, tmp_path, small_tmpfs):
    out = tmp_path / "out"
    run_dir = out / "dapo_tiny_cpu"
    overrides = [*OVERRIDES, f"trainer.default_local_dir={small_tmpfs}"]
    env = recipe_env(tiny_dir, out)
    run = RecipeRun(overrides, env, tmp_path / "full.log")
    try:
        run.wait_for(lambda: (small_tmpfs / "global_step_1" / checkpoints.MARKER).exists(), START_TIMEOUT)
        filler = fill(small_tmpfs)
        rc = run.proc.wait(timeout=600)
    finally:
        run.kill_tree()
    text = run.output()
    last = _assert_one_clear_line(text, rc)
    assert last.startswith(f"[verl-ascend] error: no space left on device in {small_tmpfs}/global_step_2: "), text[-4000:]
    assert (f"Kept: {small_tmpfs}/global_step_1 (step 1, the last complete checkpoint); global_step_2: no "
            f"{checkpoints.MARKER}, never resumed (a rerun quarantines it)") in last
    prefix = faults.assignments(faults.ours_set(env))  # the variables of ours the run was given, repeated
    assert last.endswith(f"run the same command again: {prefix} {COMMAND} {' '.join(overrides)}")
    assert not (small_tmpfs / "global_step_2" / checkpoints.MARKER).exists()

    filler.unlink()  # the user frees the disk and runs the same command again
    again = RecipeRun(overrides, env, tmp_path / "again.log")
    rc = again.wait(START_TIMEOUT + 300)
    text = again.output()
    assert rc == 0, text[-4000:]
    assert "global_step_2 is not proven whole (no verl_ascend_complete.json" in text
    assert (small_tmpfs / "global_step_2.incomplete").is_dir()
    assert read_jsonl(run_dir / files.RESUME_LOG)[-1]["resume_step"] == 1
    steps = [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == [1, 2, 3]


def test_sigkilled_training_worker_names_the_actor_pid_and_signal(tiny_dir, tmp_path):
    out = tmp_path / "out"
    run_dir = out / "dapo_tiny_cpu"
    run = RecipeRun(OVERRIDES, recipe_env(tiny_dir, out), tmp_path / "kill.log")
    try:
        run.wait_for(lambda: (s := _status(run_dir)).get("step") == 2 and s.get("phase") == "update_actor", START_TIMEOUT)
        worker = process_titled(run, "ray::WorkerDict")
        assert worker is not None, "no ray::WorkerDict process in the run's session"
        pid = worker.pid
        worker.send_signal(signal.SIGKILL)
        rc = run.proc.wait(timeout=300)
    finally:
        run.kill_tree()
    text = run.output()
    last = _assert_one_clear_line(text, rc)
    assert last.startswith("[verl-ascend] error: Ray actor WorkerDict (name "), text[-4000:]
    assert f"WorkerDict_0:0, pid {pid}, node " in last, last
    assert ") died: its process ended without a word: killed by a signal (SIGKILL, the kernel's OOM killer) or crashed" in last
    ckpt = out / "checkpoints" / "dapo_tiny_cpu"
    assert f"Kept: {ckpt}/global_step_1 (step 1, the last complete checkpoint)" in last


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None and not os.environ.get("CI"),
                    reason="vLLM's CPU build not installed (make vllm)")
def test_vllm_engine_core_killed_behind_its_live_server_is_named_by_the_watchdog(tiny_dir, tmp_path):
    out = tmp_path / "out"
    run_dir = out / "dapo_tiny_cpu"
    overrides = ["actor_rollout_ref.rollout.name=vllm", "trainer.total_training_steps=3", "fault_tolerance.rollout_timeout_s=300"]
    env = vllm_env(recipe_env(tiny_dir, out))
    run = RecipeRun(overrides, env, tmp_path / "vllm.log")
    try:
        run.wait_for(lambda: _status(run_dir).get("phase") == "rollout", START_TIMEOUT + 600)
        engine = process_titled(run, "VLLM::EngineCore")
        assert engine is not None, "no VLLM::EngineCore process in the run's session"
        pid, server = engine.pid, engine.parent()
        engine.send_signal(signal.SIGKILL)
        rc = run.proc.wait(timeout=300)
    finally:
        run.kill_tree()
    text = run.output()
    last = _assert_one_clear_line(text, rc)
    assert ": rollout server died during generation: replica 0" in last, text[-4000:]
    assert (f"[engine process EngineCore (pid {pid}) was killed by SIGKILL; the server actor (pid {server.pid}) "
            "is alive, its engine reports dead]") in last, last
    # killed in step 1 (no complete checkpoint, step 1's prompts recorded): the plain rerun would be refused
    assert "run the same command with fault_tolerance.start_over=true" in last, last


def test_memory_monitor_kill_is_named_with_the_threshold_variable(tmp_path):
    """A toy driver under ``RAY_memory_usage_threshold=0.02``: Ray kills the first actor it starts."""
    require_e2e("a Ray cluster")
    script = tmp_path / "oom.py"
    script.write_text(
        "import os, ray\n"
        "from verl_ascend.run import faults\n"
        "ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
        "@ray.remote(max_restarts=0)\n"
        "class Trainer:\n"
        "    def step(self):\n"
        "        return os.getpid()\n"
        "try:\n"
        "    ray.get(Trainer.remote().step.remote(), timeout=120)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
        f"    print(faults.describe_failure(exc, faults.RunSite({str(tmp_path / 'ckpt')!r}, {str(tmp_path)!r})))\n"
        "ray.shutdown()\n"
    )
    env = {**os.environ, "RAY_memory_usage_threshold": "0.02", "RAY_memory_monitor_refresh_ms": "100"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert lines[-2:-1] == ["OutOfMemoryError"], done.stdout[-3000:] + done.stderr[-3000:]
    assert lines[-1].startswith("Ray's memory monitor killed Trainer.__init__ (pid "), lines[-1]
    assert "went over RAY_memory_usage_threshold (2.0%); lower the batch sizes" in lines[-1]
    assert lines[-1].endswith("Kept: no complete checkpoint yet, so a rerun starts from step 1. To resume from it, fix "
                              "the cause and run the same command again")
