"""A record of the run that cannot be written stops the run at once, naming the file and the errno.

Real failures, no mocks of the write itself: ``/dev/full`` answers every write with ENOSPC (a full
disk), a path below a regular file fails with ENOTDIR. Checked: the metrics logger (upstream's
``FileLogger`` with the append patch), the journal's ledgers and ``status.json``, and the driver's
one-line message when the error comes back through Ray (``RayTaskError``) from the trainer.
"""

from __future__ import annotations

import errno
import os
import pickle

import pytest
from omegaconf import OmegaConf

from verl_ascend.run import files, metrics_append
from verl_ascend.run.journal import RunJournal

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


@pytest.fixture
def appending_logger(monkeypatch):
    from verl.utils import tracking

    monkeypatch.setattr(tracking, "FileLogger", tracking.FileLogger)  # restored after the test
    monkeypatch.setenv(files.ENV_METRICS_APPEND, "1")
    assert metrics_append.install_metrics_append()
    return tracking


def test_metrics_write_on_a_full_disk_names_the_file_and_errno(appending_logger, monkeypatch):
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/dev/full")
    tracker = appending_logger.Tracking(project_name="p", experiment_name="e", default_backend=["file"], config={})
    with pytest.raises(files.RunFileError) as caught:
        tracker.log({"loss": 1.0}, step=2)
    assert caught.value.errno == errno.ENOSPC
    assert str(caught.value).startswith("cannot write /dev/full: errno 28 (ENOSPC: No space left on device)")
    assert "run the same command again" in str(caught.value)


def test_metrics_file_that_cannot_be_opened(appending_logger, tmp_path, monkeypatch):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(blocker / "metrics.jsonl"))
    with pytest.raises(files.RunFileError, match=r"not_a_folder/metrics.jsonl: errno 17 \(EEXIST"):
        appending_logger.FileLogger("p", "e")


def test_journal_writes_stop_the_run(tmp_path, monkeypatch):
    monkeypatch.delenv(files.ENV_METRICS_APPEND, raising=False)
    run_dir = tmp_path / "run"
    run_dir.write_text("")  # a file where the run folder should be: every journal write fails
    journal = RunJournal(OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}}), run_dir=str(run_dir))
    with pytest.raises(files.RunFileError, match=r"run/prompts.jsonl: errno 20 \(ENOTDIR"):
        journal.record_prompts({"index": [1, 2]}, step=1)
    with pytest.raises(files.RunFileError, match=r"run/status.json: errno 20"):
        journal.status("rollout", 1)


def test_the_error_survives_ray_and_the_driver_prints_one_line(tmp_path):
    from ray.exceptions import RayTaskError

    from verl_ascend.run import faults

    original = files.RunFileError(errno.EACCES, "Permission denied", "/runs/exp/metrics.jsonl")
    copy = pickle.loads(pickle.dumps(original))  # how it crosses from the worker
    assert (type(copy), copy.errno, copy.filename) == (files.RunFileError, errno.EACCES, "/runs/exp/metrics.jsonl")
    wrapped = RayTaskError("TaskRunner.run", "Traceback (most recent call last): ...", copy).as_instanceof_cause()
    site = faults.RunSite(str(tmp_path / "ckpt"), str(tmp_path / "run"))
    assert faults.what_happened(wrapped, site) == (
        "cannot write /runs/exp/metrics.jsonl: errno 13 (EACCES: Permission denied); the run stopped at the first "
        "record it could not keep"
    )
    assert faults.what_happened(RuntimeError("other"), site) is None


def test_main_returns_1_with_the_message(tmp_path, monkeypatch, capsys):
    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend import launch

    def failing_run(recipe, config):
        raise files.RunFileError(errno.ENOSPC, "No space left on device", "/runs/exp/metrics.jsonl")

    monkeypatch.setattr(launch, "prepare", lambda recipe, config, device: None)
    monkeypatch.setattr(launch, "start", failing_run)
    monkeypatch.delenv("DRY_RUN", raising=False)
    assert launch.launch(RECIPE, OmegaConf.create({})) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "[verl-ascend] error: cannot write /runs/exp/metrics.jsonl: errno 28 (ENOSPC: No space left on device); the "
        "run stopped at the first record it could not keep. Kept: no complete checkpoint yet"
    )
    assert err.count("\n") == 1 and "Traceback" not in err
