"""Shared fixtures: the tiny assets (built once per session into a temp dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The embedded default's model, tokenizer and data, built offline and deterministically."""
    from recipe.dapo_ascend.tiny.assets import build

    root = Path(os.environ.get("VERL_ASCEND_TEST_TINY_DIR", tmp_path_factory.mktemp("tiny") / "assets"))
    return build(root)


def pytest_configure(config):
    # `make test` runs `-m "not e2e"`, `make test-e2e` runs `-m e2e`; tests/launch.py fails any
    # unmarked test that launches the recipe or starts Ray.
    config.addinivalue_line(
        "markers", "e2e: launches the recipe, upstream's main_ppo, a run script or a Ray cluster (minutes)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Tell tests/launch.py whether the test about to run (fixtures included) may launch."""
    from tests.launch import E2E_ENV

    os.environ[E2E_ENV] = "1" if item.get_closest_marker("e2e") else "0"
