"""The e2e guard: an unmarked test that launches the recipe or Ray fails at once, naming itself."""

from __future__ import annotations

import os

import pytest

from tests.launch import E2E_ENV, require_e2e


def test_unmarked_test_is_told_so():
    assert os.environ[E2E_ENV] == "0"  # set by tests/conftest.py for this very test
    with pytest.raises(pytest.fail.Exception) as failed:
        require_e2e("the recipe's entry point")
    message = str(failed.value)
    assert "test_unmarked_test_is_told_so" in message and "not marked e2e" in message
    assert "the recipe's entry point" in message


@pytest.mark.e2e
def test_marked_test_may_launch():
    assert os.environ[E2E_ENV] == "1"
    require_e2e("the recipe's entry point")  # no failure
