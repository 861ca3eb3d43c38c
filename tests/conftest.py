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
    # CI runs `-m "e2e and not slow"` (make test-e2e); `make test-e2e-full` runs every e2e test.
    config.addinivalue_line(
        "markers", "slow: an e2e variant whose capability another e2e test covers in CI (another rollout "
                   "engine or entry point); make test-e2e-full runs it"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Tell tests/launch.py whether the test about to run (fixtures included) may launch."""
    from tests.launch import E2E_ENV

    os.environ[E2E_ENV] = "1" if item.get_closest_marker("e2e") else "0"


# The memory plan traces each training phase of the model named by the config under fake tensors: about 45 s
# of CPU a phase for the 32B job, and the doctor runs it for every config it checks, so dozens of variants of
# the 32B config in the checks' tests would take most of an hour. Tests that are about something else plan
# without the training phases (the rollout, weight-update and residency terms stay: the tests that assert a
# memory refusal outside MEMORY_PLAN_TESTS refuse on the rollout's weights). The tests of the plan itself, the
# launch's memory refusal, tests/npu (its own process) and every subprocess (DRY_RUN, the launch, the
# e2e tests) plan in full, the traces cached on disk by shape.
MEMORY_PLAN_TESTS = ("tests/verl_ascend/memory/", "tests/recipe/test_memory_refusal.py", "tests/npu/")


@pytest.fixture(autouse=True)
def _no_training_trace_outside_the_memory_tests(request, monkeypatch):
    path = Path(str(request.node.fspath)).resolve().relative_to(REPO).as_posix()
    if path.startswith(MEMORY_PLAN_TESTS):
        return
    from verl_ascend.memory import training

    monkeypatch.setattr(training, "plan_training", lambda config, *, overrides=None: ())
