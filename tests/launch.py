"""The two expensive things a test can start -- the recipe's entry point and a Ray cluster -- go through here.

`make test` runs ``-m "not e2e"`` and must stay fast on two cores, so every test that launches the
recipe (or upstream's ``main_ppo``, or a run script) or starts Ray has to carry the ``e2e`` marker.
``require_e2e`` enforces that at the moment of the launch: an unmarked test fails naming itself,
instead of silently making the fast set slow. ``tests/conftest.py`` tells it the current test's
markers through ``VERL_ASCEND_TEST_E2E``.
"""

from __future__ import annotations

import os
import time

import pytest

E2E_ENV = "VERL_ASCEND_TEST_E2E"
# Ray's node start-up wait is a fixed 30 s (ray/_private/node.py); on a busy 2-core machine the raylet
# can miss it. The failure happens before any test code runs, so a fresh attempt is safe.
_RAY_START_ATTEMPTS = 3
_RAY_START_MESSAGE = "timed out during startup"


def require_e2e(what: str) -> None:
    """Fail the current test unless it is marked ``e2e`` (it is about to launch ``what``)."""
    if os.environ.get(E2E_ENV) == "0":
        test = os.environ.get("PYTEST_CURRENT_TEST", "this test").rsplit(" (", 1)[0]
        pytest.fail(f"{test} launches {what} but is not marked e2e: add @pytest.mark.e2e (see tests/launch.py)",
                    pytrace=False)


def start_local_ray(**kwargs):
    """``ray.init(**kwargs)`` for an e2e test, retried when the node misses Ray's fixed start-up wait."""
    import ray

    require_e2e("a Ray cluster")
    for attempt in range(1, _RAY_START_ATTEMPTS + 1):
        try:
            return ray.init(**kwargs)
        except Exception as exc:  # Ray raises a bare Exception for this
            if _RAY_START_MESSAGE not in str(exc) or attempt == _RAY_START_ATTEMPTS:
                raise
            ray.shutdown()
            time.sleep(5 * attempt)
