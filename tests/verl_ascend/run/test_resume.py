"""Resume after ``kill -9`` with nothing lost: the tiny CPU recipe is killed mid-rollout,
mid-update and mid-checkpoint-write, then run again with the same command each time.

Checked on the real run (one module-scoped scenario, four starts of the same command):
- every start resumes from the last *complete* checkpoint; the one whose write was interrupted
  is never picked (it is renamed ``global_step_<N>.incomplete``);
- the prompts the run took from the dataloader, by dataset ``index``, are exactly the sampler's
  order: no prompt skipped or repeated across the kills;
- the metrics file holds each training step once, 1..N, across the kills.
Unit tests below pin the selection rules on hand-made checkpoint folders (truncated tracker,
truncated shard, deleted shards, checkpoints without a marker: quarantined) and the one runtime patch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_ascend.run import checkpoints, files, metrics_append
from tests.recipe.fault_helpers import SMALL_STEPS, RecipeRun, read_json, read_jsonl, recipe_env


# ----------------------------------------------------------------------------- unit: selection
def _checkpoint(root: Path, step: int, marked: bool = True, world: int = 1, data: bool = True) -> Path:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    for prefix in ("model", "optim", "extra_state"):
        for rank in range(world):
            (folder / "actor" / f"{prefix}_world_size_{world}_rank_{rank}.pt").write_bytes(b"x" * (100 + step))
    if data:
        (folder / "data.pt").write_bytes(b"d" * 10)
    if marked:
        checkpoints.write_marker(str(folder), step)
    return folder


def _tracker(root: Path, text: str) -> None:
    (root / checkpoints.TRACKER).write_text(text)


CONTENTS = ["model", "optimizer", "extra"]


def test_tracker_checkpoint_used_when_complete(tmp_path):
    for step in (1, 2, 3):
        _checkpoint(tmp_path, step)
    _tracker(tmp_path, "2")  # e.g. rolled back by hand: upstream's tracker is respected
    sel = checkpoints.select_checkpoint(str(tmp_path))
    assert (sel.step, sel.rejected) == (2, {})


def test_interrupted_write_is_never_picked(tmp_path):
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 3, marked=False)  # killed before the marker: upstream may already say 3
    _tracker(tmp_path, "3")
    sel = checkpoints.repair_checkpoints(str(tmp_path))
    assert sel.step == 2 and "no verl_ascend_complete.json" in sel.rejected[3]
    assert (tmp_path / checkpoints.TRACKER).read_text() == "2"
    assert not (tmp_path / "global_step_3").exists() and (tmp_path / "global_step_3.incomplete").is_dir()
    # Idempotent: a second start sees the same state.
    assert checkpoints.repair_checkpoints(str(tmp_path)).step == 2


def test_truncated_tracker_falls_back_to_newest_complete(tmp_path):
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    _tracker(tmp_path, "")  # killed inside upstream's open("w")/write: int("") would crash resume
    sel = checkpoints.repair_checkpoints(str(tmp_path))
    assert sel.step == 2 and sel.tracker_problem.startswith("unreadable")
    assert (tmp_path / checkpoints.TRACKER).read_text() == "2"


def test_truncated_or_deleted_shards_are_rejected(tmp_path):
    _checkpoint(tmp_path, 1)
    two = _checkpoint(tmp_path, 2)
    three = _checkpoint(tmp_path, 3)
    with open(three / "actor" / "optim_world_size_1_rank_0.pt", "r+b") as f:
        f.truncate(7)
    # max_actor_ckpt_to_keep=1: upstream deletes the previous actor folder before the tracker moves.
    for f in (two / "actor").iterdir():
        f.unlink()
    _tracker(tmp_path, "3")
    sel = checkpoints.select_checkpoint(str(tmp_path))
    assert sel.step == 1
    assert "7 bytes" in sel.rejected[3] and "missing" in sel.rejected[2]


def test_nothing_complete_starts_from_scratch(tmp_path):
    _checkpoint(tmp_path, 1, marked=False)
    _checkpoint(tmp_path, 2, marked=True, data=False)  # marked while data.pt was missing
    (tmp_path / "global_step_2" / "data.pt").write_bytes(b"")  # appears later: still not vouched for
    _tracker(tmp_path, "1")
    sel = checkpoints.repair_checkpoints(str(tmp_path))
    assert sel.step == 0
    assert not (tmp_path / checkpoints.TRACKER).exists() and (tmp_path / (checkpoints.TRACKER + ".invalid")).exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("global_step")) == [
        "global_step_1.incomplete",
        "global_step_2.incomplete",
    ]


def test_checkpoints_without_a_marker_are_quarantined_not_resumed(tmp_path, capsys):
    """The metrics write of step 2 failed: no folder carries a marker. File existence proves
    nothing (the step's metrics were never recorded): nothing is resumed, nothing is deleted."""
    _checkpoint(tmp_path, 1, marked=False)
    _checkpoint(tmp_path, 2, marked=False)
    _tracker(tmp_path, "2")
    sel = checkpoints.repair_checkpoints(str(tmp_path))
    assert sel.step == 0 and sel.path is None
    assert all("no verl_ascend_complete.json" in sel.rejected[s] for s in (1, 2))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_1.incomplete", "global_step_2.incomplete", checkpoints.TRACKER + ".invalid"]
    assert (tmp_path / "global_step_2.incomplete" / "data.pt").read_bytes() == b"d" * 10  # kept as it was
    out = capsys.readouterr().out
    assert "global_step_2 is not proven whole (no verl_ascend_complete.json" in out and "quarantined as" in out


def test_older_unproven_folders_are_quarantined_too(tmp_path):
    _checkpoint(tmp_path, 1, marked=False)
    _checkpoint(tmp_path, 2)
    _tracker(tmp_path, "2")
    assert checkpoints.repair_checkpoints(str(tmp_path)).step == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("global")) == [
        "global_step_1.incomplete", "global_step_2"]


def test_a_marker_without_checksums_does_not_prove_a_checkpoint(tmp_path):
    _checkpoint(tmp_path, 1)
    two = _checkpoint(tmp_path, 2)
    marker = json.loads((two / checkpoints.MARKER).read_text())
    del marker["checksums"], marker[checkpoints.SELF_CHECKSUM]  # a marker from before checksums were kept
    (two / checkpoints.MARKER).write_text(json.dumps(marker))
    sel = checkpoints.select_checkpoint(str(tmp_path))
    assert sel.step == 1 and "records no checksums" in sel.rejected[2]


def test_a_good_checkpoint_is_resumed_and_kept(tmp_path):
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    _tracker(tmp_path, "2")
    sel = checkpoints.repair_checkpoints(str(tmp_path))
    assert (sel.step, sel.rejected) == (2, {}) and sel.path == str(tmp_path / "global_step_2")
    assert not any(p.name.endswith(checkpoints.INCOMPLETE_SUFFIX) for p in tmp_path.iterdir())


def test_trim_jsonl_keeps_whole_records_up_to_the_step(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1, "data": {}}\n{"step": 2, "data": {}}\n{"step": 3, "data": {}}\n{"step": 4, "da')
    assert files.trim_jsonl(str(path), 2) == (2, 2)
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]


def test_same_size_corruption_is_caught_by_checksum(tmp_path, capsys):
    _checkpoint(tmp_path, 1)
    two = _checkpoint(tmp_path, 2)
    shard = two / "actor" / "model_world_size_1_rank_0.pt"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.seek(10)
        f.write(b"\xff" * 8)
    assert shard.stat().st_size == size
    _tracker(tmp_path, "2")
    assert checkpoints.verify_marked(str(two), 2) is None  # sizes alone cannot tell
    sel = checkpoints.repair_checkpoints(str(tmp_path))
    assert sel.step == 1
    assert "actor/model_world_size_1_rank_0.pt does not match its sha256 checksum" in sel.rejected[2]
    assert (tmp_path / "global_step_2.incomplete").is_dir() and (tmp_path / checkpoints.TRACKER).read_text() == "1"
    assert "global_step_2 is not proven whole (actor/model_world_size_1_rank_0.pt does not match" in capsys.readouterr().out


def _edit_marker(folder: Path, change) -> None:
    marker = json.loads((folder / checkpoints.MARKER).read_text())
    change(marker)
    (folder / checkpoints.MARKER).write_text(json.dumps(marker))


def test_a_wrong_checksum_in_the_marker_blames_the_marker_not_the_shard(tmp_path):
    _checkpoint(tmp_path, 1)
    two, three = _checkpoint(tmp_path, 2), _checkpoint(tmp_path, 3)
    shard = "actor/model_world_size_1_rank_0.pt"
    _edit_marker(two, lambda m: m["checksums"].update({shard: "0" * 64}))  # a valid-looking digest: the self-check
    _edit_marker(three, lambda m: (m["checksums"].update({shard: "garbage"}), m.pop(checkpoints.SELF_CHECKSUM)))
    sel = checkpoints.select_checkpoint(str(tmp_path))
    assert sel.step == 1
    assert sel.rejected[2].startswith(f"{checkpoints.MARKER} itself was changed after it was written")
    assert sel.rejected[3].startswith(f"{checkpoints.MARKER} records 'garbage' as the sha256 checksum of {shard}")
    assert all("the marker is damaged" in sel.rejected[s] and "different content" not in sel.rejected[s] for s in (2, 3))


def test_only_the_checkpoint_to_load_is_read_for_its_checksum(tmp_path, monkeypatch):
    for step in (1, 2, 3):
        _checkpoint(tmp_path, step)
    read = []
    real = checkpoints.file_checksum
    monkeypatch.setattr(checkpoints, "file_checksum", lambda path, *a: read.append(path) or real(path, *a))
    assert checkpoints.select_checkpoint(str(tmp_path)).step == 3
    assert read and all("global_step_3" in p for p in read)


def test_trimmed_records_go_to_a_side_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3}\n{"st')
    side = files.side_file_for(str(path), "20260101T000000Z")
    assert side.endswith("metrics.trimmed-20260101T000000Z.jsonl")
    assert files.trim_jsonl(str(path), 1, side) == (1, 3)
    assert path.read_bytes() == b'{"step": 1}\n'
    assert Path(side).read_bytes() == b'{"step": 2}\n{"step": 3}\n{"st\n'


def test_failed_atomic_write_leaves_no_temporary(tmp_path):
    target = tmp_path / "status.json"
    target.mkdir()  # os.replace onto a folder fails after the temporary was written
    with pytest.raises(OSError):
        files.write_atomic(str(target), b"{}")
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_second_lock_on_a_folder_names_the_holder(tmp_path, monkeypatch):
    import os
    import socket

    from verl_ascend.run.run_guard import RunLock, StartRefused

    monkeypatch.setattr(RunLock, "held", [])
    monkeypatch.setattr(RunLock, "locked", {})
    RunLock.acquire([str(tmp_path / "absent")])
    assert not (tmp_path / "absent").exists()  # not created before the start is committed
    RunLock.acquire([str(tmp_path)], create=True)
    RunLock.record_owner(str(tmp_path))
    monkeypatch.setattr(RunLock, "locked", {})  # a second run: its own open of the folder
    with pytest.raises(StartRefused) as err:
        RunLock.acquire([str(tmp_path)])
    assert f"PID {os.getpid()} on host {socket.gethostname()}" in str(err.value)
    for fd in RunLock.held:
        os.close(fd)


def test_start_over_keeps_every_earlier_record(tmp_path, monkeypatch):
    """fault_tolerance.start_over=true: training restarts at step 1, the old ledgers are moved aside."""
    from omegaconf import OmegaConf

    from verl_ascend.run import run_guard

    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(tmp_path))
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    run_dir = tmp_path / "exp"
    run_dir.mkdir()
    for name in files.HISTORY_FILES:
        (run_dir / name).write_text('{"step": 1}\n{"step": 2}\n')
    config = OmegaConf.create({
        "trainer": {"experiment_name": "exp", "logger": ["file"], "default_local_dir": str(tmp_path / "ckpt"),
                    "nnodes": 1, "n_gpus_per_node": 1, "resume_mode": "auto"},
        "actor_rollout_ref": {"actor": {"checkpoint": {"save_contents": ["model"]}}},
        "ray_kwargs": {"ray_init": {}},
        "fault_tolerance": {"start_over": False},
    })
    plan = checkpoints.plan_resume(config)
    with pytest.raises(run_guard.StartRefused, match="up to step 2"):
        run_guard.guard_history(plan.run_dir, plan.step, plan.why, files.HISTORY_FILES, False)
    assert all((run_dir / n).read_text().count("\n") == 2 for n in files.HISTORY_FILES)
    assert run_guard.guard_history(plan.run_dir, plan.step, plan.why, files.HISTORY_FILES, True)
    assert checkpoints.prepare_run(config, plan) == 0
    for name in files.HISTORY_FILES:  # metrics, prompt ledger and rollout-group ledger alike
        assert (run_dir / name).read_text() == ""
        stem = name.rsplit(".", 1)[0]
        (side,) = [p for p in run_dir.iterdir() if p.name.startswith(f"{stem}.trimmed-")]
        assert side.read_text() == '{"step": 1}\n{"step": 2}\n'


# ----------------------------------------------------------------------------- unit: the patch
def test_file_logger_patch_target_and_effect(tmp_path, monkeypatch):
    """Patch target: verl 0.9.1 ``utils/tracking.py`` ``FileLogger`` truncates its file on start.

    Fails when upstream changes that (then ``install_metrics_append`` can go) or when the names
    the patch relies on move (``FileLogger(project_name, experiment_name)``, ``.fp``, ``.log``,
    ``Tracking`` looking ``FileLogger`` up in its module).
    """
    from verl.utils import tracking

    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    upstream = tracking.FileLogger
    monkeypatch.setattr(tracking, "FileLogger", upstream)  # restored after the test

    path.write_text('{"step": 1, "data": {"a": 1}}\n')
    logger = upstream("p", "e")
    logger.log({"a": 2}, step=2)
    logger.finish()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [2]  # step 1 is gone

    monkeypatch.setenv(files.ENV_METRICS_APPEND, "1")
    assert metrics_append.install_metrics_append()
    assert tracking.FileLogger is not upstream and issubclass(tracking.FileLogger, upstream)
    path.write_text('{"step": 1, "data": {"a": 1}}\n')
    tracker = tracking.Tracking(project_name="p", experiment_name="e", default_backend=["file"], config={})
    tracker.log({"a": 2}, step=2)
    tracker.logger["file"].finish()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]


def test_tracker_file_name_matches_upstream():
    """The journal's tracker name is upstream's. The upstream members the journal and the watchdog
    rely on (PPOTrainer.fit's order, _update_actor, _wait_for_next_poll, ...) are fingerprinted by the seam
    rows recipe_journal_overrides (recipe/dapo_ascend/seams.py) and recipe_watchdog_buffer_rebind
    (verl_ascend/run/seams.py), checked by
    tests/verl_ascend/seams/test_index.py::test_fingerprint."""
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    assert get_checkpoint_tracker_filename("/x") == "/x/" + checkpoints.TRACKER


# ----------------------------------------------------------------------------- the kill scenario
STEPS = 3
OVERRIDES = [f"trainer.total_training_steps={STEPS}", *SMALL_STEPS]  # 4 prompts x 8 samples = 32 responses a step
START_TIMEOUT = 600  # start-up on a loaded 2-core machine


def _status(run_dir: Path):
    return read_json(run_dir / files.STATUS_FILE) or {}


@pytest.fixture(scope="module")
def killed_and_resumed(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume")
    run_dir = out / "dapo_tiny_cpu"
    ckpt = out / "checkpoints" / "dapo_tiny_cpu"
    env = recipe_env(tiny_dir, out)
    seen: dict = {"kills": []}

    def start(name):
        return RecipeRun(OVERRIDES, env, out / f"{name}.log")

    def kill(run, name, why):
        seen["kills"].append({"name": name, "why": why, "status": _status(run_dir), "processes": run.kill_tree()})

    # 1. mid-rollout: step 2 is generating (step 1 is checkpointed and committed).
    run = start("mid_rollout")
    try:
        run.wait_for(lambda: (s := _status(run_dir)).get("step") == 2 and s.get("phase") == "rollout", START_TIMEOUT)
    finally:
        kill(run, "mid_rollout", "step 2 rollout")

    # 2. mid-update: step 2's actor update is running.
    run = start("mid_update")
    try:
        run.wait_for(lambda: (s := _status(run_dir)).get("step") == 2 and s.get("phase") == "update_actor", START_TIMEOUT)
    finally:
        kill(run, "mid_update", "step 2 update_actor")

    # 3. mid-checkpoint-write: step 3's checkpoint folder appears (step 2 is committed by then).
    run = start("mid_checkpoint")
    try:
        run.wait_for(lambda: (ckpt / "global_step_3").exists(), START_TIMEOUT, poll_s=0.01)
    finally:
        kill(run, "mid_checkpoint", "step 3 save_checkpoint")
    seen["step3_marked_at_kill"] = (ckpt / "global_step_3" / checkpoints.MARKER).exists()
    seen["step3_files_at_kill"] = sorted(
        str(p.relative_to(ckpt / "global_step_3")) for p in (ckpt / "global_step_3").rglob("*") if p.is_file()
    )

    # 4. the same command once more: runs to the end.
    run = start("final")
    seen["final_rc"] = run.wait(START_TIMEOUT + 300)
    seen["final_log"] = run.output()
    seen["out"], seen["run_dir"], seen["ckpt"] = out, run_dir, ckpt
    return seen


@pytest.mark.e2e
def test_kills_landed_where_intended(killed_and_resumed):
    kills = {k["name"]: k for k in killed_and_resumed["kills"]}
    assert kills["mid_rollout"]["status"]["phase"] == "rollout"
    assert kills["mid_update"]["status"]["phase"] == "update_actor"
    assert kills["mid_checkpoint"]["status"] == {**kills["mid_checkpoint"]["status"], "step": 3, "phase": "save_checkpoint"}
    assert all(k["processes"] > 5 for k in kills.values())  # driver, GCS, raylet, workers: the whole tree
    assert not killed_and_resumed["step3_marked_at_kill"]


@pytest.mark.e2e
def test_each_start_resumed_from_the_last_complete_checkpoint(killed_and_resumed):
    assert killed_and_resumed["final_rc"] == 0, killed_and_resumed["final_log"][-4000:]
    records = read_jsonl(killed_and_resumed["run_dir"] / files.RESUME_LOG)
    assert [r["resume_step"] for r in records] == [0, 1, 1, 2]
    # The interrupted step-3 checkpoint was seen and refused, then moved out of the way.
    assert "3" in records[-1]["rejected"]
    ckpt = killed_and_resumed["ckpt"]
    assert (ckpt / "global_step_3.incomplete").is_dir()
    assert (ckpt / checkpoints.TRACKER).read_text().strip() == str(STEPS)
    for step in range(1, STEPS + 1):
        assert checkpoints.verify_marked(str(ckpt / f"global_step_{step}"), step) is None
    assert "resuming after step 2" in killed_and_resumed["final_log"]


@pytest.mark.e2e
def test_data_order_continues_exactly(killed_and_resumed, tiny_dir):
    """The prompts taken, by dataset index, are the sampler's order with nothing skipped or repeated."""
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import create_rl_sampler

    records = read_jsonl(killed_and_resumed["run_dir"] / files.PROMPTS_FILE)
    steps = [r["step"] for r in records]
    assert steps == sorted(steps) and set(steps) == set(range(1, STEPS + 1))
    taken = [i for r in records for i in r["index"]]
    assert len(taken) == len(set(taken)), "a prompt was taken twice"
    rows = pq.read_table(tiny_dir / "data" / "train.parquet").column("extra_info").to_pylist()
    sampler = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": 1}), list(range(len(rows))))
    expected = [rows[i]["index"] for i in sampler][: len(taken)]
    assert taken == expected
    # Each step took at least a batch (DAPO's dynamic sampling may take more).
    per_step = {s: sum(len(r["index"]) for r in records if r["step"] == s) for s in range(1, STEPS + 1)}
    assert all(n >= 4 for n in per_step.values()), per_step


@pytest.mark.e2e
def test_step_counter_and_metrics_continue(killed_and_resumed):
    metrics = read_jsonl(killed_and_resumed["run_dir"] / "metrics.jsonl")
    train = [m for m in metrics if "critic/score/mean" in m.get("data", {})]
    assert [m["step"] for m in train] == list(range(1, STEPS + 1))
    assert all(m["data"]["training/global_step"] == m["step"] for m in train if "training/global_step" in m["data"])
