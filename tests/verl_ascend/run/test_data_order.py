"""The data a run was started on, pinned (``verl_ascend/run/data_order.py``).

With real files: the tiny recipe's parquet data, a marked checkpoint folder, the entry point
in-process (``main_with_config``, Ray replaced by a stub that records what it was handed).
A resume on the same data passes; a replaced training file is refused before Ray (exit 2) naming
the file with its recorded and current fingerprint; ``fault_tolerance.new_data_order=true``
continues, records a new data era, and makes the trainer keep a fresh dataloader position
(checked on upstream's own ``StatefulDataLoader`` and stateful ``RandomSampler``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from verl_ascend.run import checkpoints, data_order
from verl_ascend.run.files import RESUME_LOG, read_jsonl
from verl_ascend.run.run_guard import RunLock, StartRefused
from tests.recipe.helpers import REPO


# ----------------------------------------------------------------------------- unit: the decision
def _config(files, seed=1):
    return OmegaConf.create({"data": {"train_files": [str(f) for f in files], "seed": seed, "shuffle": True}})


def test_fresh_run_pins_every_file_then_the_same_data_resumes(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    a.write_bytes(b"rows of a")
    b.write_bytes(b"rows of b!")
    first = data_order.plan_data_order(_config([a, b]), 0, str(tmp_path), False)
    (era,) = first["eras"]
    assert [(f["path"], f["size"]) for f in era["files"]] == [(str(a), 9), (str(b), 10)]
    assert era["files"][0]["sha256"] == checkpoints.file_checksum(str(a)) and (era["seed"], era["shuffle"]) == (1, True)
    data_order.record_data_order(str(tmp_path), first)
    again = data_order.plan_data_order(_config([a, b]), 4, str(tmp_path), False)
    assert (again["fresh_order"], again["eras"]) == (False, first["eras"])


@pytest.mark.parametrize("change, needle", [
    (lambda a, cfg: a.write_bytes(b"rows of A"), "a.parquet changed: recorded 9 bytes, sha256 "),  # same size
    (lambda a, cfg: a.write_bytes(b"more rows of a"), "now 14 bytes"),
    (lambda a, cfg: cfg.data.update(seed=2), "data.seed changed: recorded 1, now 2"),
])
def test_changed_data_is_refused_naming_the_file(tmp_path, change, needle):
    a = tmp_path / "a.parquet"
    a.write_bytes(b"rows of a")
    data_order.record_data_order(str(tmp_path), data_order.plan_data_order(_config([a]), 0, str(tmp_path), False))
    cfg = _config([a])
    change(a, cfg)
    with pytest.raises(StartRefused) as refused:
        data_order.plan_data_order(cfg, 3, str(tmp_path), False)
    text = str(refused.value)
    assert needle in text and "since the checkpoint of step 3" in text and "fault_tolerance.new_data_order=true" in text


@pytest.mark.parametrize("content", [b"{not json", b'{"eras": 3}', b'{"eras": [{"after_step": 0, "files": [7]}]}'])
def test_an_unreadable_record_refuses_a_resume_naming_the_file(tmp_path, content):
    a = tmp_path / "a.parquet"
    a.write_bytes(b"rows of a")
    (tmp_path / data_order.DATA_ORDER_FILE).write_bytes(content)
    with pytest.raises(StartRefused) as refused:
        data_order.plan_data_order(_config([a]), 3, str(tmp_path), False)
    assert f"{tmp_path / data_order.DATA_ORDER_FILE}: cannot read the recorded data order" in str(refused.value)
    # a fresh start pins anew over it
    fresh = data_order.plan_data_order(_config([a]), 0, str(tmp_path), False)
    data_order.record_data_order(str(tmp_path), fresh)
    assert data_order.read_eras(str(tmp_path)) == fresh["eras"]


def test_new_data_order_is_recorded_and_survives_a_crash_before_the_next_checkpoint(tmp_path):
    a = tmp_path / "a.parquet"
    a.write_bytes(b"old rows")
    data_order.record_data_order(str(tmp_path), data_order.plan_data_order(_config([a]), 0, str(tmp_path), False))
    a.write_bytes(b"new rows, more of them")
    moved_on = data_order.plan_data_order(_config([a]), 3, str(tmp_path), True)
    assert moved_on["fresh_order"] and [e["after_step"] for e in moved_on["eras"]] == [0, 3]
    assert "a.parquet changed: recorded 8 bytes" in moved_on["eras"][1]["replaces"][0]
    data_order.record_data_order(str(tmp_path), moved_on)
    # Killed before step 4's checkpoint: the rerun resumes from step 3 again, fresh order again, no key needed.
    again = data_order.plan_data_order(_config([a]), 3, str(tmp_path), False)
    assert again["fresh_order"] and again["eras"] == moved_on["eras"]
    # After a checkpoint of the new era: a plain resume.
    later = data_order.plan_data_order(_config([a]), 5, str(tmp_path), False)
    assert not later["fresh_order"]
    # Rolled back by hand to a checkpoint trained on the old rows: refused again.
    with pytest.raises(StartRefused, match="since the checkpoint of step 2"):
        data_order.plan_data_order(_config([a]), 2, str(tmp_path), False)
    # A start over replaces the eras; the old ones are kept under "superseded".
    data_order.record_data_order(str(tmp_path), data_order.plan_data_order(_config([a]), 0, str(tmp_path), False))
    saved = json.loads((tmp_path / data_order.DATA_ORDER_FILE).read_text())
    assert [e["after_step"] for e in saved["eras"]] == [0] and saved["superseded"] == moved_on["eras"]


def test_fresh_order_is_the_order_of_a_new_run(tmp_path):
    """Upstream's loader and sampler: after the checkpoint's position is loaded, ``keep_fresh_order``
    puts back the position and the shuffling generator a new loader on this data starts with."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    from verl.trainer.ppo.utils import create_rl_sampler

    rows = list(range(40))
    config = OmegaConf.create({"shuffle": True, "seed": 1})

    def loader():
        return StatefulDataLoader(rows, batch_size=4, sampler=create_rl_sampler(config, rows), drop_last=True)

    def first_batches(dl, n=3):
        it = iter(dl)
        return [next(it).tolist() for _ in range(n)]

    trained = loader()
    it = iter(trained)
    for _ in range(5):
        next(it)
    position = trained.state_dict()  # what data.pt holds after 5 batches
    new_run = first_batches(loader())

    resumed = loader()
    resumed.load_state_dict(position)
    assert first_batches(resumed) != new_run  # upstream's resume: the old position on these rows

    fresh = loader()
    assert data_order.keep_fresh_order(fresh, lambda: fresh.load_state_dict(position)) is None
    assert first_batches(fresh) == new_run
    assert torch.is_tensor(next(iter(fresh)))


# ----------------------------------------------------------------------------- the entry point
@pytest.fixture
def entry(tiny_dir, tmp_path, monkeypatch):
    """Compose the tiny config on a copy of its data, with Ray replaced by a recording stub."""
    from hydra import compose, initialize_config_dir

    from recipe.dapo_ascend.main_dapo import RECIPE

    from verl_ascend import launch

    train = tmp_path / "train.parquet"
    shutil.copy(tiny_dir / "data" / "train.parquet", train)
    out = tmp_path / "out"
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(out))
    for name in ("VERL_FILE_LOGGER_PATH", "DRY_RUN", data_order.ENV_FRESH_DATA_ORDER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(RunLock, "held", [])
    monkeypatch.setattr(RunLock, "locked", {})
    started = []
    monkeypatch.setattr(launch, "start", lambda recipe, config: started.append(dict(os.environ)))

    def start(*overrides):
        with initialize_config_dir(config_dir=str(REPO / "recipe" / "dapo_ascend" / "config"), version_base=None):
            cfg = compose(config_name="dapo_tiny_cpu", overrides=[f"tiny_dir={tiny_dir}", *overrides])
        with open_dict(cfg):
            cfg.data.train_files = str(train)
        return launch.launch(RECIPE, cfg)

    yield start, train, out, started
    for fd in RunLock.held:
        os.close(fd)


def _marked_checkpoint(out: Path, step: int) -> None:
    root = out / "checkpoints" / "dapo_tiny_cpu"
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * 64)
    (folder / "data.pt").write_bytes(b"d" * 8)
    checkpoints.write_marker(str(folder), step)
    (root / checkpoints.TRACKER).write_text(str(step))


def _rewrite_rows(train: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(train)
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), train)


def test_the_entry_point_pins_refuses_and_continues(entry, capsys):
    start, train, out, started = entry
    assert start() == 0 and len(started) == 1  # a new run pins its data
    run_dir = out / "dapo_tiny_cpu"
    assert (run_dir / data_order.DATA_ORDER_FILE).is_file()
    pinned = json.loads((run_dir / data_order.DATA_ORDER_FILE).read_text())["eras"]
    assert [f["path"] for f in pinned[0]["files"]] == [str(train)]

    _marked_checkpoint(out, 2)  # as if steps 1-2 were trained and checkpointed
    assert start() == 0 and started[-1][data_order.ENV_FRESH_DATA_ORDER] == "0"  # same data: resumes
    assert "same data as the checkpoint of step 2" in capsys.readouterr().out

    _rewrite_rows(train)  # same rows, other order: another file
    assert start() == 2 and len(started) == 2  # refused before Ray
    err = capsys.readouterr().err
    assert f"{train} changed: recorded {pinned[0]['files'][0]['size']} bytes" in err
    assert "fault_tolerance.new_data_order=true" in err and "Traceback" not in err
    assert json.loads((run_dir / data_order.DATA_ORDER_FILE).read_text())["eras"] == pinned  # unchanged

    assert start("fault_tolerance.new_data_order=true") == 0 and len(started) == 3
    assert started[-1][data_order.ENV_FRESH_DATA_ORDER] == "1"  # the trainer keeps a fresh position
    eras = json.loads((run_dir / data_order.DATA_ORDER_FILE).read_text())["eras"]
    assert [e["after_step"] for e in eras] == [0, 2] and eras[1]["files"][0]["sha256"] != pinned[0]["files"][0]["sha256"]
    last = read_jsonl(str(run_dir / RESUME_LOG))[-1]
    assert last["resume_step"] == 2 and last["data_order"]["fresh_order"] is True
    assert "fault_tolerance.new_data_order=true: fresh data order after step 2" in capsys.readouterr().out
