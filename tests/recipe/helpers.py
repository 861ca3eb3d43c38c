"""Run the recipe's entry point the way a user does: a subprocess with Hydra overrides (``run_recipe``,
marker ``e2e``), or in this process for every start that ends before Ray (the fixture ``entry``).

``entry(*overrides)`` composes the tiny config with Hydra's compose API (the overrides a user types)
and calls the toolkit's ``launch`` with the recipe's declaration, with ``start`` (Ray, training)
replaced by a stub that records its config. It returns a ``subprocess.CompletedProcess``-shaped result: the exit status and what the
entry point printed on stdout and stderr. ``entry.cli(*argv)`` goes through ``verl-ascend train`` for what
its command line refuses before Hydra composes anything (upstream's old keys); Hydra's own launch
(``hydra.main``) is not run in this process: a test that needs it starts a subprocess.

A start that stops before Ray must leave this process as it found it: the fixture fails a test whose
stopped start kept a run lock or changed ``os.environ``, and puts back what a committed start kept
(its locks, as the end of the driver's process does). tests/recipe/conftest.py offers it to every test
there; elsewhere, import it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch import require_e2e

REPO = Path(__file__).resolve().parents[2]


def run_recipe(
    overrides: list[str],
    tiny_dir: Path,
    out_dir: Path,
    timeout: int = 600,
    env: dict | None = None,
    config: str = "dapo_tiny_cpu",
):
    require_e2e("the recipe's entry point")
    full_env = {
        **os.environ,
        "VERL_ASCEND_TINY_DIR": str(tiny_dir),
        "VERL_ASCEND_OUTPUT_DIR": str(out_dir),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    full_env.pop("VERL_FILE_LOGGER_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "verl_ascend", "train", "--config-name", config, *overrides],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def entry(tiny_dir, tmp_path, monkeypatch, capsys):
    from hydra import compose, initialize_config_dir

    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend import launch
    from verl_ascend.run.run_guard import RunLock

    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("VERL_ASCEND_TINY_DIR", str(tiny_dir))
    for name in ("VERL_FILE_LOGGER_PATH", "DRY_RUN", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(RunLock, "held", [])
    monkeypatch.setattr(RunLock, "locked", {})
    started = []
    monkeypatch.setattr(launch, "start", lambda recipe, config: started.append(config))

    def finished(code: int, environ: dict) -> subprocess.CompletedProcess:
        captured = capsys.readouterr()
        if code != 0 or not started:  # stopped before Ray: nothing of it may stay in this process
            assert RunLock.held == [] and RunLock.locked == {}, "a stopped start kept a run lock"
            assert dict(os.environ) == environ, "a stopped start changed os.environ"
        return subprocess.CompletedProcess("main_with_config", code, captured.out, captured.err)

    def start(*overrides: str, config_name: str = "dapo_tiny_cpu") -> subprocess.CompletedProcess:
        with initialize_config_dir(config_dir=str(REPO / "recipe" / "dapo_ascend" / "config"), version_base=None):
            cfg = compose(config_name=config_name, overrides=[f"tiny_dir={tiny_dir}", *overrides])
        environ = dict(os.environ)
        return finished(launch.launch(RECIPE, cfg), environ)

    def cli(*argv: str) -> subprocess.CompletedProcess:
        # composing imports upstream's stack, and some of it sets variables at import (Ray's RAY_CLIENT_MODE,
        # torch's LAZY_LEGACY_OP): done once here, so the comparison below sees only what the start changed
        RECIPE.compose("dapo_tiny_cpu", [f"tiny_dir={tiny_dir}"])
        environ = dict(os.environ)
        monkeypatch.setattr(launch, "launch", lambda recipe, config: pytest.fail("the command line accepted it"))
        try:
            code = launch.train(["--config-name", "dapo_tiny_cpu", f"tiny_dir={tiny_dir}", *argv], RECIPE)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        return finished(code, environ)

    def release():  # what the end of the driver process does
        while RunLock.held:
            os.close(RunLock.held.pop())
        RunLock.locked.clear()

    start.started, start.release, start.cli = started, release, cli
    yield start
    release()
