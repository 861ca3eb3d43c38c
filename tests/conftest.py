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
    # Registered only: `make test` selects by path, so marking a test e2e changes nothing it runs;
    # `-m "not e2e"` leaves out the end-to-end runs.
    config.addinivalue_line("markers", "e2e: an end-to-end training run (minutes); `-m 'not e2e'` skips it")
