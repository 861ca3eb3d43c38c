"""Bad inputs that used to start Ray or end in a traceback, each refused before Ray by the real entry
point (in-process ``main_with_config``, exit 2, the key or file named, no traceback) -- or accepted
where the docs say so (``rollout_timeout_s=0``: off; a second ``make demo`` with
``VERL_FILE_LOGGER_PATH`` set: a fresh start like the first).

Real files throughout: the tiny model and data, output folders, a dangling symbolic link, a marked
checkpoint with a hand-written tracker. Ray is replaced by a stub that counts the starts.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from verl_ascend.run import checkpoints
from verl_ascend.run.files import RESUME_LOG, read_jsonl

EXPERIMENT = "dapo_tiny_cpu"


def _refused(result, *needles):
    code, text = result.returncode, result.stdout + result.stderr
    assert code == 2, text[-3000:]
    for needle in needles:
        assert needle in text, (needle, text[-3000:])
    assert "Traceback" not in text


@pytest.mark.parametrize("overrides, needles", [
    (["trainer.v1.dapo_ascend.warm_workers=100000"],
     ["trainer.v1.dapo_ascend.warm_workers=100000", "an integer from 0 (off) to 64"]),
    (["trainer.v1.dapo_ascend.warm_workers=-1"], ["trainer.v1.dapo_ascend.warm_workers=-1"]),
    (["+fault_tolerance.rollout_timout_s=5"],  # a typo: silently the default before
     ["fault_tolerance.rollout_timout_s: unknown key", "'rollout_timeout_s'", "'new_data_order'"]),
    ([f"trainer.experiment_name={'x' * 300}"], ["trainer.experiment_name='xxx", "at most 200 bytes"]),
    (["fault_tolerance.rollout_timeout_s=-1"], ["fault_tolerance.rollout_timeout_s=-1", "0: off"]),
    (["actor_rollout_ref.rollout.n=1"],  # DAPO: grpo with dynamic sampling, on a group of one response
     ["rollout_n_group", "actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator=grpo", "REINFORCE without a "
      "baseline", "filters nothing", "accepted: actor_rollout_ref.rollout.n >= 2"]),
])
def test_refused_before_ray_naming_the_key(entry, tmp_path, overrides, needles):
    _refused(entry(*overrides), *needles)
    assert entry.started == [] and not (tmp_path / "out").exists()


def test_accepted_bounds(entry):
    """The largest warm-worker count, a 200-byte name and rollout_timeout_s=0 (documented: off) start."""
    r = entry("trainer.v1.dapo_ascend.warm_workers=64", f"trainer.experiment_name={'n' * 200}",
              "fault_tolerance.rollout_timeout_s=0")
    code, text = r.returncode, r.stdout + r.stderr
    assert code == 0 and len(entry.started) == 1, text[-3000:]
    from verl_ascend.run.options import FaultTolerance
    from verl_ascend.run.watchdog import RolloutWatchdog

    dog = RolloutWatchdog.from_config(entry.started[0], lambda: [])
    assert dog.rollout_timeout_s == 0.0 == FaultTolerance.from_config(entry.started[0]).rollout_timeout_s


def test_rollout_timeout_zero_never_fails_the_wait():
    from types import SimpleNamespace

    from verl_ascend.run.watchdog import RolloutWatchdog

    now = [0.0]
    dog = RolloutWatchdog(lambda: [], rollout_timeout_s=0, ping_timeout_s=60, clock=lambda: now[0])
    buffer = SimpleNamespace(pending_keys={"train": [1]}, running_keys={"train": []}, finished_keys={"train": []},
                             failure_keys={"train": []}, partitions={"train": []})
    dog.begin(1, "train")
    now[0] = 10**7  # months without progress
    dog.check(buffer, "train")  # no RolloutStalledError
    stalled = RolloutWatchdog(lambda: [], rollout_timeout_s=30, ping_timeout_s=60, clock=lambda: now[0])
    stalled.begin(1, "train")
    stalled.check(buffer, "train")
    now[0] += 31
    with pytest.raises(Exception, match="rollout_timeout_s=30"):
        stalled.check(buffer, "train")


def test_metrics_path_that_is_a_device(entry, tmp_path, monkeypatch):
    """/dev/zero as the metrics file would be read back forever (trim at resume, progress line)."""
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/dev/zero")
    _refused(entry(), "VERL_FILE_LOGGER_PATH='/dev/zero' is not a regular file; accepted: a file path")
    assert entry.started == []


def test_output_folder_that_is_a_dangling_link(entry, tmp_path, monkeypatch):
    link = tmp_path / "outputs"
    link.symlink_to(tmp_path / "gone")
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(link))
    _refused(entry(), f"{link}' is a symbolic link to '{tmp_path / 'gone'}', which does not exist",
             "create the link's target")
    assert entry.started == [] and not (tmp_path / "gone").exists()


def _marked_checkpoint(root: Path, step: int) -> None:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * 64)
    (folder / "data.pt").write_bytes(b"d" * 8)
    checkpoints.write_marker(str(folder), step)


@pytest.mark.parametrize("text", ["0", "-3"])
def test_tracker_naming_no_step_points_at_the_tracker(entry, tmp_path, text):
    root = tmp_path / "out" / "checkpoints" / EXPERIMENT
    for step in (1, 2):
        _marked_checkpoint(root, step)
    tracker = root / checkpoints.TRACKER
    tracker.write_text(text)
    _refused(entry(), f"{tracker} reads {text}, which names no checkpoint",
             "complete checkpoints in trainer.default_local_dir: global_step_1, global_step_2", "(e.g. 2)")
    assert entry.started == [] and tracker.read_text() == text
    assert sorted(p.name for p in root.iterdir()) == ["global_step_1", "global_step_2", checkpoints.TRACKER]


def test_tracker_behind_the_complete_checkpoints_offers_fixing_it_first(entry, tmp_path):
    root = tmp_path / "out" / "checkpoints" / EXPERIMENT
    for step in (2, 4, 6):
        _marked_checkpoint(root, step)
    tracker = root / checkpoints.TRACKER
    tracker.write_text("1")
    _refused(entry(), f"{tracker} reads 1, but global_step_1 is no complete checkpoint (named by the tracker but absent)",
             "trainer.default_local_dir: global_step_2, global_step_4, global_step_6; this start would resume nothing",
             f"`echo 6 > {tracker}` resumes after step 6", "fault_tolerance.start_over=true trains from step 1 instead")
    assert entry.started == [] and tracker.read_text() == "1"
    assert sorted(p.name for p in root.iterdir()) == ["global_step_2", "global_step_4", "global_step_6", checkpoints.TRACKER]
    tracker.write_text("6")  # the fix offered first
    assert entry().returncode == 0 and len(entry.started) == 1


def test_second_demo_with_an_outside_metrics_file_starts_from_step_1(entry, tmp_path, monkeypatch):
    """README: `VERL_FILE_LOGGER_PATH=... make demo`, twice. The journal stays in the run folder,
    which `make demo` removes; the metrics file elsewhere is rolled back like the others."""
    metrics = tmp_path / "elsewhere" / "m.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics))
    out = tmp_path / "out"
    for attempt in (1, 2):
        r = entry()
        code, text = r.returncode, r.stdout + r.stderr
        assert code == 0 and len(entry.started) == attempt, text[-3000:]
        assert "training starts from step 1" in text
        run_dir = out / EXPERIMENT
        assert read_jsonl(str(run_dir / RESUME_LOG))[-1]["resume_step"] == 0
        assert not metrics.exists() if attempt == 1 else metrics.read_text() == ""  # nothing of the first run left in it
        # What the demo's run leaves: 3 steps of metrics outside, the journal and a checkpoint inside.
        metrics.parent.mkdir(exist_ok=True)
        metrics.write_text("".join(json.dumps({"step": s, "data": {}}) + "\n" for s in (1, 2, 3)))
        (run_dir / "prompts.jsonl").write_text('{"step": 1, "index": [0]}\n')
        (run_dir / "rollout_groups.jsonl").write_text('{"step": 1, "event": "trained", "uids": ["a"]}\n')
        _marked_checkpoint(out / "checkpoints" / EXPERIMENT, 3)
        assert not (metrics.parent / "prompts.jsonl").exists()  # the journal is not next to the metrics
        entry.release()  # the first run's process ends
        # `make demo` starts by removing its own output folders.
        shutil.rmtree(run_dir)
        shutil.rmtree(out / "checkpoints" / EXPERIMENT)
    (side,) = [p for p in metrics.parent.iterdir() if p.name.startswith("m.trimmed-")]
    assert [json.loads(x)["step"] for x in side.read_text().splitlines()] == [1, 2, 3]  # kept, not erased


class _Blocker:
    """A ``sys.meta_path`` finder for which ``package`` (and its submodules) is not installed."""

    def __init__(self, package):
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.package or fullname.startswith(self.package + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by the test)", name=fullname)
        return None


@pytest.fixture
def without_vllm(monkeypatch):
    import sys

    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Blocker("vllm"), *sys.meta_path])


def test_vllm_rollout_without_vllm_installed(entry, tmp_path, without_vllm):
    _refused(entry("actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm.garbage=1"),
             "actor_rollout_ref.rollout.name=vllm, but this Python", "cannot import 'vllm'",
             "accepted: an engine installed here, one of ['hf'")
    assert entry.started == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("key, needles", [
    ("garbage_arg", ["engine_kwargs.vllm.garbage_arg: not an option of the installed vLLM's `vllm serve`",
                     "'unrecognized arguments'", "fields of vLLM's EngineArgs"]),
    ("enforce_eagr", ["engine_kwargs.vllm.enforce_eagr: not an option", "did you mean enforce_eager"]),
])
def test_unknown_vllm_engine_argument(entry, tmp_path, key, needles):
    pytest.importorskip("vllm.engine.arg_utils", reason="vLLM not installed: its option names cannot be read")
    _refused(entry("actor_rollout_ref.rollout.name=vllm", f"+actor_rollout_ref.rollout.engine_kwargs.vllm.{key}=1"),
             *needles)
    assert entry.started == [] and not (tmp_path / "out").exists()


def test_a_vllm_engine_argument_of_the_wrong_type(entry, tmp_path):
    """Its EngineArgs field declares int | None: upstream would pass --max_num_batched_tokens abc inside Ray."""
    pytest.importorskip("vllm.engine.arg_utils", reason="vLLM not installed")
    _refused(entry("actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm."
                   "max_num_batched_tokens=abc"),
             "engine_kwargs_type", "engine_kwargs.vllm.max_num_batched_tokens='abc': the installed vLLM declares "
             "EngineArgs.max_num_batched_tokens: int | None", "accepted: an integer or null")
    assert entry.started == [] and not (tmp_path / "out").exists()
    r = entry("actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_batched_tokens=8192")
    assert r.returncode == 0 and len(entry.started) == 1, (r.stdout + r.stderr)[-3000:]


def test_known_vllm_engine_arguments_start(entry):
    """Options of `vllm serve` in either spelling (the parser takes both) reach the start."""
    pytest.importorskip("vllm.engine.arg_utils", reason="vLLM not installed")
    r = entry("actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_logprobs=4",
              "+actor_rollout_ref.rollout.engine_kwargs.vllm.max-num-batched-tokens=64")
    code, text = r.returncode, r.stdout + r.stderr
    assert code == 0 and len(entry.started) == 1, text[-3000:]
    assert entry.started[0].actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager is True  # tiny_cpu's


def test_second_run_is_refused_by_the_lock_before_any_check(entry, tmp_path, monkeypatch):
    """The lock comes first: a run folder held by a live run refuses the start naming the holder,
    without the checks (30-150 s on a busy machine) and without changing a byte of the folder."""
    import fcntl
    import socket

    from verl_ascend import launch

    run_dir = tmp_path / "out" / EXPERIMENT
    run_dir.mkdir(parents=True)
    (run_dir / "owner.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": 0,
                                                    "command": "verl-ascend train (the first)"}))
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    holder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)  # another open file: it conflicts like another process
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    checked = []
    monkeypatch.setattr(launch, "check", lambda config: checked.append(config))
    try:
        result = entry()
    finally:
        os.close(holder)
    _refused(result, f"another run is using {str(run_dir)!r}: PID {os.getpid()} on host {socket.gethostname()}",
             "(the first)")
    assert checked == [] and entry.started == []
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_a_start_with_a_warning_shows_it_before_ray(entry):
    """A warning does not stop the start, but `verl-ascend train` prints it (rule, message) before Ray starts."""
    r = entry("actor_rollout_ref.hybrid_engine=false")  # read by separate_async only; the tiny config is sync
    code, text = r.returncode, r.stdout + r.stderr
    assert code == 0 and len(entry.started) == 1, text[-3000:]
    assert "[verl-ascend] warning: hybrid_engine_off: actor_rollout_ref.hybrid_engine=false with " in text, text[-3000:]
    quiet = entry()
    assert quiet.returncode == 0 and "[verl-ascend] warning:" not in quiet.stdout + quiet.stderr
