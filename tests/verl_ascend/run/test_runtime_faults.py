"""A run that fails while training ends in one line naming the fault, what was kept and how to resume.

Real failures where the machine allows: torch's own writer filling a size-limited tmpfs (mounted
when run as root), upstream's own ``local_mkdir_safe`` and ``torch.save`` on an immutable folder
(``chattr +i``, which stops root too) or a read-only one; Ray's exceptions built as Ray builds them
(``ActorDiedError`` from an ``ActorDiedErrorContext``, ``RayTaskError`` once per hop, the memory
monitor's ``OutOfMemoryError``); checkpoints with real markers. No Ray cluster is started here
(the real runs are in ``tests/recipe/test_runtime_faults_e2e.py``).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import uuid

import pytest
import torch
from omegaconf import OmegaConf

from verl_ascend.run import faults, files
from verl_ascend.run.checkpoints import write_marker
from verl_ascend.run.files import STATUS_FILE


def _ray_hops(exc: BaseException, *functions: str) -> BaseException:
    """``exc`` wrapped like Ray wraps it on its way to the driver: one ``RayTaskError`` per hop."""
    from ray.exceptions import RayTaskError

    for function in functions:
        exc = RayTaskError(function, "Traceback (most recent call last): ...", exc, pid=4321, ip="10.0.0.7").as_instanceof_cause()
    return exc


def _actor_died(error_message: str, class_name: str = "WorkerDict", pid: int = 4242):
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError

    context = ActorDiedErrorContext(class_name=class_name, actor_id=os.urandom(16), pid=pid,
                                    node_ip_address="10.0.0.7", error_message=error_message)
    return ActorDiedError(cause=context)  # as ray._private.serialization builds it (keyword: picklable)


@pytest.fixture
def site(tmp_path):
    """A run that completed and marked step 1, and was saving step 2 when it failed."""
    ckpt, run_dir = tmp_path / "ckpt", tmp_path / "run"
    step1 = ckpt / "global_step_1"
    (step1 / "actor").mkdir(parents=True)
    (step1 / "data.pt").write_bytes(b"loader")
    (step1 / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"weights")
    write_marker(str(step1), 1)
    (ckpt / "global_step_2" / "actor").mkdir(parents=True)  # half written: no marker
    run_dir.mkdir()
    (run_dir / STATUS_FILE).write_text(json.dumps({"step": 2, "phase": "save_checkpoint"}))
    return faults.RunSite(str(ckpt), str(run_dir), "auto", "verl-ascend train trainer.total_training_steps=3")


KEPT = "global_step_1 (step 1, the last complete checkpoint); global_step_2: no verl_ascend_complete.json, never resumed"


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: torch may still hold the failed file open


@pytest.fixture
def immutable(tmp_path):
    """A folder nobody may write into: ``chattr +i`` as root (permission bits do not stop root), else
    mode 0555 (EACCES instead of EPERM)."""
    folder = tmp_path / "frozen"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i not supported here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


DENIED = "errno 1 EPERM: Operation not permitted" if os.geteuid() == 0 else "errno 13 EACCES: Permission denied"


def test_torch_writer_on_a_full_disk_says_no_space_left_naming_the_folder(site, small_tmpfs):
    saving = small_tmpfs / "global_step_2"
    saving.mkdir()
    with pytest.raises(RuntimeError) as caught:  # torch hides the errno: "unexpected pos" / "iostream error"
        torch.save({"w": torch.zeros(1 << 20)}, str(saving / "model_world_size_1_rank_0.pt"))
    assert "No space left" not in str(caught.value)
    moved = faults.RunSite(str(small_tmpfs), site.run_dir)
    line = faults.describe_failure(_ray_hops(caught.value, "WorkerDict.save_checkpoint", "TaskRunner.run"), moved)
    assert line.startswith(f"no space left on device in {saving}: the checkpoint save failed ([enforce fail at inline_container.cc")
    assert "MiB free of 1 MiB" in line
    assert line.endswith("Kept: no complete checkpoint yet, so a rerun starts from step 1; global_step_2: no "
                         "verl_ascend_complete.json, never resumed (a rerun quarantines it). To resume from it, fix the "
                         "cause and run the same command again")


def test_enospc_with_its_errno_names_the_file_kept_and_the_command(site):
    exc = OSError(errno.ENOSPC, "No space left on device", f"{site.checkpoints}/global_step_2/data.pt")
    line = faults.describe_failure(_ray_hops(exc, "TaskRunner.run"), site)
    assert line.startswith(f"no space left on device in {site.checkpoints}/global_step_2: cannot write "
                           f"{site.checkpoints}/global_step_2/data.pt (errno 28 ENOSPC: No space left on device); ")
    assert f"Kept: {site.checkpoints}/{KEPT}" in line
    assert line.endswith("run the same command again: verl-ascend train trainer.total_training_steps=3")


def test_checkpoint_folder_made_unwritable_mid_run(site, immutable):
    from verl.utils.fs import local_mkdir_safe

    with pytest.raises(PermissionError) as made:  # upstream's own mkdir of the next step's folder
        local_mkdir_safe(str(immutable / "global_step_2" / "actor"))
    line = faults.describe_failure(_ray_hops(made.value, "WorkerDict.save_checkpoint", "TaskRunner.run"), site)
    assert line.startswith(f"permission denied writing {immutable}/global_step_2 ({DENIED}); make it writable. Kept: ")

    with pytest.raises(RuntimeError) as saved:  # torch's writer: "open file failed", no path
        torch.save({"w": 1}, str(immutable / "data.pt"))
    frozen = faults.RunSite(str(immutable), site.run_dir)
    line = faults.describe_failure(_ray_hops(saved.value, "TaskRunner.run"), frozen)
    code = DENIED.split(" ", 2)[2]  # "EPERM: Operation not permitted"
    assert line.startswith(f"permission denied writing the checkpoint folder {immutable}/global_step_2 ({code}); make it writable")


def test_probe_gives_the_errno_of_the_folder(tmp_path, immutable):
    assert faults.probe_folder(str(tmp_path / "not" / "yet" / "made")) is None  # nearest parent is writable
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".verl_ascend_write_probe")]
    assert faults.probe_folder(str(immutable / "global_step_3")) == (errno.EPERM if os.geteuid() == 0 else errno.EACCES)


def test_sigkilled_worker_names_the_actor_its_pid_and_the_signal(site):
    died = _actor_died(
        class_name="create_colocated_worker_cls.<locals>.WorkerDict",  # how verl's colocated workers are named
        error_message="The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file.",
    )
    line = faults.describe_failure(_ray_hops(died, "TaskRunner.run"), site)
    assert line.startswith("Ray actor WorkerDict (pid 4242, node 10.0.0.7) died: its process ended without a word: "
                           "killed by a signal (SIGKILL, the kernel's OOM killer) or crashed. Kept: ")
    assert KEPT in line


def test_memory_monitor_kill_names_the_task_and_the_threshold_variable(site):
    from ray.exceptions import OutOfMemoryError

    report = (
        "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.0.7, ID: ab12) "
        "was 22.41GB used / 23.54GB limit (0.952)\nOOM kill reason: Memory usage 24062000000B exceeded threshold of "
        "22362000000B (95.0% of 23540000000B limit)\nSelected to kill: (Actor(ff01): job ID=01000000, task "
        "name=WorkerDict.update_actor, required resources={}, pid=5150, actual memory used=9.1GB, worker ID=cd34)\n"
        "To adjust the kill threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray."
    )
    line = faults.describe_failure(_ray_hops(OutOfMemoryError(report), "TaskRunner.run"), site)
    assert line.startswith(
        "Ray's memory monitor killed WorkerDict.update_actor (pid 5150, node 10.0.0.7): the node's memory "
        "(22.41GB used / 23.54GB limit) went over RAY_memory_usage_threshold (95.0%); lower the batch sizes "
        "(data.train_batch_size, "
    )
    assert "start Ray with a higher RAY_memory_usage_threshold (default 0.95). Kept: " in line

    # The same kill seen as the death of the actor it hit.
    died = _actor_died("The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY "
                       "Worker exit detail: Task was killed due to the node running low on memory.")
    line = faults.describe_failure(_ray_hops(died, "TaskRunner.run"), site)
    assert line.startswith("Ray's memory monitor killed WorkerDict (pid 4242, node 10.0.0.7): the node's memory went over")


def test_watchdog_verdict_is_the_line_with_what_was_kept(site):
    from verl_ascend.run.watchdog import RolloutServerDiedError, RolloutWatchdog

    dog = RolloutWatchdog(lambda: [], rollout_timeout_s=60, ping_timeout_s=5)
    dog.begin(2, "train")
    verdict = RolloutServerDiedError(dog._died_message({"replica 0 (10.0.0.7:8000)": "engine process VLLM::EngineCore_DP0 (pid 77) died"}))
    line = faults.describe_failure(_ray_hops(verdict, "TaskRunner.run"), site)
    assert line.startswith("step 2: rollout server died during generation: replica 0 (10.0.0.7:8000) [engine process "
                           "VLLM::EngineCore_DP0 (pid 77) died]. The step is abandoned. Kept: ")
    assert line.count("run the same command") == 1


def test_an_unnamed_fault_names_the_original_error_under_rays_wrappers(site):
    wrapped = _ray_hops(ValueError("bad shape (3, 4)\nmore detail"), "WorkerDict.update_actor", "TaskRunner.run")
    assert faults.describe_failure(wrapped, site) is None
    line = faults.unnamed_failure(wrapped, site)
    assert line.startswith("the run stopped: ValueError: bad shape (3, 4). Kept: ")


def test_resume_mode_disable_says_how_to_resume(site):
    disabled = faults.RunSite(site.checkpoints, site.run_dir, "disable", None)
    text = faults.kept_and_resume(disabled)
    assert text.endswith("To resume from it, fix the cause and run the same command with trainer.resume_mode=auto")


def test_a_stop_whose_plain_rerun_is_refused_says_what_the_rerun_needs(tmp_path):
    """A metrics write failing at step 1: no checkpoint, but the prompt ledger holds step 1. The same command
    would be refused (history without a checkpoint), so the line names fault_tolerance.start_over=true."""
    from verl_ascend.run import run_guard
    from verl_ascend.run.files import HISTORY_FILES

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "prompts.jsonl").write_text('{"step": 1, "index": [3, 1]}\n')
    stopped = faults.RunSite(str(tmp_path / "ckpt"), str(run_dir), command="verl-ascend train")
    failure = files.RunFileError(28, "No space left on device", str(run_dir / "metrics.jsonl"))
    line = faults.describe_failure(failure, stopped)
    assert "Kept: no complete checkpoint yet, only the records of the steps trained (prompts.jsonl up to step 1)" in line
    assert line.endswith("run the same command with fault_tolerance.start_over=true: verl-ascend train")
    assert "run the same command again" not in line
    with pytest.raises(run_guard.StartRefused):  # what the plain rerun would meet
        run_guard.guard_history(str(run_dir), 0, "no checkpoint", HISTORY_FILES, start_over=False)
    assert run_guard.guard_history(str(run_dir), 0, "no checkpoint", HISTORY_FILES, start_over=True)


@pytest.fixture
def recipe_config(site):
    root = os.path.dirname(site.checkpoints)
    return OmegaConf.create({"trainer": {"experiment_name": "exp", "default_local_dir": site.checkpoints,
                                         "logger": ["console"], "resume_mode": "auto"}}), root


def test_main_prints_one_last_line_and_exits_1(recipe_config, monkeypatch, capsys):
    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend import launch

    config, root = recipe_config
    died = _ray_hops(_actor_died("Worker exit type: SYSTEM_ERROR Worker exit detail: connection error code 2."), "TaskRunner.run")
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", os.path.join(root))
    monkeypatch.setattr(launch, "prepare", lambda recipe, config, device: None)
    monkeypatch.setattr(launch, "start", lambda recipe, config: (_ for _ in ()).throw(died))
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "verl_ascend", "train", "trainer.total_training_steps=3", "data.path=a b"])
    monkeypatch.delenv("DRY_RUN", raising=False)
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    assert launch.launch(RECIPE, config) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("[verl-ascend] error: Ray actor WorkerDict (pid 4242, node 10.0.0.7) died")
    assert err.rstrip().endswith(f"run the same command again: VERL_ASCEND_OUTPUT_DIR={root} python -m verl_ascend "
                                 "train trainer.total_training_steps=3 'data.path=a b'")  # the variable it was given


def test_main_prints_the_traceback_of_an_unnamed_fault_then_the_line(recipe_config, monkeypatch, capsys):
    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend import launch

    config, root = recipe_config
    marker = f"unnamed-{uuid.uuid4().hex}"
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", root)
    monkeypatch.setattr(launch, "prepare", lambda recipe, config, device: None)
    monkeypatch.setattr(launch, "start", lambda recipe, config: (_ for _ in ()).throw(KeyError(marker)))
    monkeypatch.delenv("DRY_RUN", raising=False)
    assert launch.launch(RECIPE, config) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1].startswith(f"[verl-ascend] error: the run stopped: KeyError: '{marker}'. Kept: ")


def _sleeper():
    import time

    time.sleep(600)


def test_server_health_names_a_killed_engine_process_by_pid_and_signal():
    """``server_health`` as it runs in a vLLM server actor, here in-process on an object shaped like
    ``vLLMHttpServer`` -> ``AsyncLLM`` -> ``MPClient.resources.engine_manager.processes`` holding a real
    ``multiprocessing`` process (vLLM's engine cores are those), SIGKILLed."""
    import multiprocessing
    import signal
    from types import SimpleNamespace

    from verl_ascend.run.watchdog import RolloutWatchdog, server_health

    proc = multiprocessing.get_context("spawn").Process(target=_sleeper, name="EngineCore_DP0", daemon=True)
    proc.start()
    manager = SimpleNamespace(processes=[proc])
    engine = SimpleNamespace(errored=False, engine_core=SimpleNamespace(resources=SimpleNamespace(engine_manager=manager)))
    server = SimpleNamespace(engine=engine)
    dog = RolloutWatchdog(lambda: [], rollout_timeout_s=60, ping_timeout_s=5)
    healthy = server_health(server)
    assert healthy["engines"] == [(proc.pid, "EngineCore_DP0", None)] and proc.pid in healthy["children"]
    assert dog._engine_dead("replica 0", healthy) is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    engine.errored = True  # what vLLM's monitor thread sets when the sentinel fires
    assert dog._engine_dead("replica 0", server_health(server)) == (
        f"engine process EngineCore_DP0 (pid {proc.pid}) was killed by SIGKILL; the server actor (pid {os.getpid()}) "
        "is alive, its engine reports dead"
    )
    # An engine without a process list: named from the children seen at the last healthy answer.
    assert dog._engine_dead("replica 1", {"engine_dead": False, "children": {41: "python"}, "pid": 9}) is None
    assert dog._engine_dead("replica 1", {"engine_dead": True, "children": {}, "pid": 9}) == (
        "engine process python (pid 41) died; the server actor (pid 9) is alive, its engine reports dead"
    )
    assert server_health(SimpleNamespace(engine=object()))["engine_dead"] is False  # the hf server: no engine process


def test_rerun_command_is_the_started_command_with_the_interpreter_written_python(monkeypatch):
    monkeypatch.setattr(faults, "_started_env", {})
    monkeypatch.setattr(sys, "orig_argv", ["/opt/venv/bin/python3.11", "-u", "-m", "verl_ascend", "train",
                                           "--config-name", "dapo_tiny_cpu", "data.path=a b"])
    assert faults.rerun_command() == "python -u -m verl_ascend train --config-name dapo_tiny_cpu 'data.path=a b'"
    monkeypatch.setattr(sys, "orig_argv", ["python3", "recipe/dapo_ascend/main_dapo.py", "trainer.total_training_steps=3"])
    assert faults.rerun_command() == "python recipe/dapo_ascend/main_dapo.py trainer.total_training_steps=3"


def test_rerun_command_of_the_console_script_is_what_the_user_typed(monkeypatch):
    monkeypatch.setattr(faults, "_started_env", {})
    monkeypatch.setattr(sys, "orig_argv", ["/opt/venv/bin/python3.11", "/opt/venv/bin/verl-ascend", "train",
                                           "trainer.total_training_steps=3"])
    assert faults.rerun_command() == "verl-ascend train trainer.total_training_steps=3"


def test_rerun_command_repeats_the_variables_of_ours_this_start_was_given(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "orig_argv", ["/opt/venv/bin/python3.11", "/opt/venv/bin/verl-ascend", "train"])
    monkeypatch.setattr(faults, "_started_env", None)
    for name in faults.ours_set(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(tmp_path / "my out"))
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/data/m.jsonl")
    monkeypatch.setenv("VERL_ASCEND_DOCTOR_STRICT", "")  # set but empty: says nothing
    monkeypatch.setenv("VERL_ASCEND_RUN_DIR", "/wire/set/by/us")  # ours to our own processes: never repeated
    monkeypatch.setenv("HOME_GROWN", "x")  # not ours
    faults.remember_environment()
    monkeypatch.setenv("VERL_ASCEND_METRICS_APPEND", "1")  # exported by the launch after it: not the user's
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/exported/by/prepare.jsonl")
    assert faults.rerun_command() == (f"VERL_ASCEND_OUTPUT_DIR='{tmp_path}/my out' VERL_FILE_LOGGER_PATH=/data/m.jsonl "
                                      "verl-ascend train")
