"""Resume across trainer modes (``checkpoints.check_trainer_mode``): the refusing variant.

The run journal records the trainer mode in each checkpoint's completion marker; before Ray, a
start in another mode than its checkpoint's is refused (exit 2, nothing on disk changed), naming
both modes, what upstream's trainers keep differently (``transfer_queue/``) and the ways out. With
real files: marked checkpoint folders, the journal itself, the entry point in-process (Ray stubbed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ascend.run import checkpoints
from verl_ascend.run.files import RESUME_LOG, read_jsonl
from verl_ascend.run.journal import RunJournal
from verl_ascend.run.run_guard import StartRefused
from tests.verl_ascend.run.test_data_order import entry  # noqa: F401  (the in-process entry point)


def _checkpoint(root: Path, step: int, mode) -> Path:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * 64)
    (folder / "data.pt").write_bytes(b"d" * 8)
    checkpoints.write_marker(str(folder), step, None if mode is None else {checkpoints.MODE_FIELD: mode})
    (root / checkpoints.TRACKER).write_text(str(step))
    return folder


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_journal_records_the_mode_in_the_marker(tmp_path, monkeypatch):
    from verl.utils import tracking

    monkeypatch.setattr(tracking, "FileLogger", tracking.FileLogger)  # the journal installs its seam rows
    config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path), "v1": {"trainer_mode": "separate_async"}},
                               "actor_rollout_ref": {"actor": {}}})
    folder = _checkpoint(tmp_path, 2, None)
    journal = RunJournal(config, run_dir=None)
    journal.after_save(2)
    journal.commit_checkpoint()
    assert checkpoints.recorded_mode(str(folder)) == "separate_async"


def _plan(root: Path, mode: str, start_over: bool = False, resume_path=None):
    trainer = {"default_local_dir": str(root), "v1": {"trainer_mode": mode}}
    if resume_path:
        trainer.update(resume_mode="resume_path", resume_from_path=str(resume_path), nnodes=1, n_gpus_per_node=1)
    config = OmegaConf.create({"trainer": trainer, "actor_rollout_ref": {"actor": {"checkpoint": {}}},
                               "data": {"train_files": []}})
    plan = checkpoints.Plan(0, "", str(root), str(root / "run"), None)
    if resume_path:
        plan.step, plan.checkpoint = 2, str(resume_path)
    else:
        plan.selection = checkpoints.select_checkpoint(str(root))
        plan.step, plan.checkpoint = plan.selection.step, plan.selection.path
    checkpoints.check_trainer_mode(config, plan, start_over)
    return plan


@pytest.mark.parametrize("written, wanted, needle", [
    ("separate_async", "sync", "those prompts would be skipped"),
    ("sync", "separate_async", "sync writes no transfer_queue/"),
    ("colocate_async", "separate_async", "the other mode's placement and weight sync"),
])
def test_another_mode_is_refused_naming_both_and_the_way_out(tmp_path, written, wanted, needle):
    _checkpoint(tmp_path, 2, written)
    before = _tree(tmp_path)
    with pytest.raises(StartRefused) as caught:
        _plan(tmp_path, wanted)
    message = str(caught.value)
    assert f"trainer.v1.trainer_mode={wanted}, but the checkpoint" in message
    assert f"was written in {written}" in message and needle in message
    assert f"Accepted: trainer.v1.trainer_mode={written} to resume it" in message
    assert "fault_tolerance.start_over=true" in message and "trainer.experiment_name" in message
    assert _tree(tmp_path) == before


def test_the_same_mode_resumes_and_an_unrecorded_mode_is_named_unknown(tmp_path, capsys):
    _checkpoint(tmp_path, 2, "colocate_async")
    assert _plan(tmp_path, "colocate_async").step == 2
    _checkpoint(tmp_path, 4, None)  # a marker written before the mode was recorded
    assert _plan(tmp_path, "sync").step == 4
    assert "global_step_4 records no trainer mode (written before verl-ascend recorded it): resumed in sync" in \
        capsys.readouterr().out


def test_a_named_checkpoint_offers_another_checkpoint_not_start_over(tmp_path):
    folder = _checkpoint(tmp_path, 2, "sync")
    with pytest.raises(StartRefused, match="trainer.resume_from_path naming a checkpoint written in this mode") as caught:
        _plan(tmp_path, "colocate_async", start_over=True, resume_path=folder)
    assert "start_over" not in str(caught.value)


def test_start_over_trains_the_new_mode_from_step_1(tmp_path):
    _checkpoint(tmp_path, 2, "separate_async")
    plan = _plan(tmp_path, "sync", start_over=True)
    assert (plan.step, plan.checkpoint, plan.selection.step) == (0, None, 0)
    assert "written in separate_async" in plan.why


def test_the_entry_point_refuses_before_ray_and_start_over_continues(entry, capsys):  # noqa: F811
    start, _, out, started = entry
    assert start() == 0 and len(started) == 1
    root = out / "checkpoints" / "dapo_tiny_cpu"
    _checkpoint(root, 2, "separate_async")  # as if an async run had trained and saved step 2
    before = _tree(out)
    assert start() == 2 and len(started) == 1  # sync on an async checkpoint: refused before Ray
    err = capsys.readouterr().err
    assert "was written in separate_async" in err and "Traceback" not in err
    assert _tree(out) == before

    assert start("fault_tolerance.start_over=true") == 0 and len(started) == 2
    assert not (root / checkpoints.TRACKER).exists() and (root / (checkpoints.TRACKER + ".invalid")).exists()
    last = read_jsonl(str(out / "dapo_tiny_cpu" / RESUME_LOG))[-1]
    assert (last["resume_step"], last["trainer_mode"]) == (0, "sync")
    assert json.loads((root / "global_step_2" / checkpoints.MARKER).read_text())["trainer_mode"] == "separate_async"
    assert os.path.isdir(root / "global_step_2")  # kept


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_the_recipe_config_in_an_async_mode_meets_the_mode_refusal_first(entry, mode, capsys):  # noqa: F811
    """sync -> async on the tiny recipe's real config: every other check passes, the mode refusal is what stops it."""
    start, _, out, started = entry
    _checkpoint(out / "checkpoints" / "dapo_tiny_cpu", 2, "sync")
    assert start(f"trainer.v1.trainer_mode={mode}") == 2 and started == []
    err = capsys.readouterr().err
    assert f"trainer.v1.trainer_mode={mode}, but the checkpoint" in err and "was written in sync" in err
