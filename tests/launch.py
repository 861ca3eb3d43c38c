"""The two expensive things a test can start -- the recipe's entry point and a Ray cluster -- go through here.

`make test` runs ``-m "not e2e"`` and must stay fast on two cores, so every test that launches the
recipe (or upstream's ``main_ppo``, or a run script) or starts Ray has to carry the ``e2e`` marker.
``require_e2e`` enforces that at the moment of the launch: an unmarked test fails naming itself,
instead of silently making the fast set slow. ``tests/conftest.py`` tells it the current test's
markers through ``VERL_ASCEND_TEST_E2E``.
"""

from __future__ import annotations

import os

import pytest

E2E_ENV = "VERL_ASCEND_TEST_E2E"


def require_e2e(what: str) -> None:
    """Fail the current test unless it is marked ``e2e`` (it is about to launch ``what``)."""
    if os.environ.get(E2E_ENV) == "0":
        test = os.environ.get("PYTEST_CURRENT_TEST", "this test").rsplit(" (", 1)[0]
        pytest.fail(f"{test} launches {what} but is not marked e2e: add @pytest.mark.e2e (see tests/launch.py)",
                    pytrace=False)


def start_local_ray(**kwargs):
    """``ray.init(**kwargs)`` for an e2e test, with the product's retry of Ray's start-up timeout."""
    import ray

    from verl_ascend.run.cluster import start_ray

    require_e2e("a Ray cluster")
    return start_ray(lambda: ray.init(**kwargs))
