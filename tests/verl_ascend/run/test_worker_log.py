"""Upstream's agent-loop tracebacks about a dead rollout server go to ``<run dir>/worker_errors.log``, not stderr.

Seam row ``agent_loop_dead_actor_log``: the filter sits on upstream's own logger (by the name its module
gives it), fed real records with a real ``ray.exceptions.ActorDiedError`` the way ``_run_prompt`` logs
them (``logger.error(..., exc_info=(type, error, tb))``). The end-to-end check, a killed rollout server,
is ``tests/verl_ascend/run/test_rollout_failure.py::test_recipe_step_fails_clearly_when_the_rollout_server_dies``.
"""

from __future__ import annotations

import io
import logging

import pytest
from ray.exceptions import ActorDiedError

from verl_ascend.run import files, worker_log


@pytest.fixture
def upstream_logger():
    """Upstream's logger with a stream handler standing for the worker's stderr; filters removed afterwards."""
    logger = logging.getLogger(worker_log.UPSTREAM_LOGGER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    before = list(logger.filters)
    yield logger, stream
    logger.removeHandler(handler)
    logger.filters[:] = before


def _log_failure(logger, error: BaseException) -> None:
    try:
        raise error
    except BaseException as raised:
        logger.error("Error in _run_prompt for uid=u1", exc_info=(type(raised), raised, raised.__traceback__))


def test_upstream_logger_name_is_the_modules_own():
    import verl.trainer.ppo.v1.agent_loop_tq as module

    assert module.logger.name == worker_log.UPSTREAM_LOGGER


def test_dead_actor_records_are_kept_in_the_run_folder_and_off_stderr(tmp_path, monkeypatch, upstream_logger):
    logger, stream = upstream_logger
    monkeypatch.setenv(files.ENV_RUN_DIR, str(tmp_path))
    assert worker_log.install() is True
    assert worker_log.install() is True  # twice in one process: still one filter
    assert sum(isinstance(f, worker_log.DeadActorFilter) for f in logger.filters) == 1

    for _ in range(3):
        _log_failure(logger, ActorDiedError())
    _log_failure(logger, ValueError("reward function broke"))
    try:  # an actor death behind another exception (the chain is walked)
        try:
            raise ActorDiedError()
        except ActorDiedError as died:
            raise RuntimeError("generate failed") from died
    except RuntimeError as wrapped:
        logger.error("wrapped", exc_info=(type(wrapped), wrapped, wrapped.__traceback__))

    shown = stream.getvalue()
    assert "reward function broke" in shown and "Traceback" in shown  # other failures still reach the console
    assert "ActorDiedError" not in shown and "wrapped" not in shown
    kept = (tmp_path / worker_log.KEPT_FILE).read_text()
    assert kept.count("ActorDiedError") >= 4 and kept.count("Error in _run_prompt for uid=u1") == 3
    summary = worker_log.kept_summary(str(tmp_path))
    assert "logged 4 traceback(s)" in summary and str(tmp_path / worker_log.KEPT_FILE) in summary


def test_outside_a_launched_run_upstream_logging_is_untouched(monkeypatch, upstream_logger):
    logger, stream = upstream_logger
    monkeypatch.delenv(files.ENV_RUN_DIR, raising=False)
    assert worker_log.install() is False
    _log_failure(logger, ActorDiedError())
    assert "ActorDiedError" in stream.getvalue()
    assert worker_log.kept_summary(None) == ""


def test_a_record_that_cannot_be_kept_is_shown(tmp_path, monkeypatch, upstream_logger):
    logger, stream = upstream_logger
    monkeypatch.setenv(files.ENV_RUN_DIR, str(tmp_path / "gone"))  # the folder does not exist: the write fails
    worker_log.install()
    _log_failure(logger, ActorDiedError())
    assert "ActorDiedError" in stream.getvalue()
    assert worker_log.kept_summary(str(tmp_path / "gone")) == ""
