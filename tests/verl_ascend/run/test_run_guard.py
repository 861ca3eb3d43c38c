"""One live run per output folder and checkpoints verified by content, on real training runs.

One module-scoped scenario on the tiny CPU recipe (3 + 2 training steps in all):
1. run A trains steps 1..3; while it trains, run B starts with the same command: B exits at once,
   non-zero, naming A's PID and host, and A finishes with metrics steps 1..3 exactly once;
2. 4 KiB inside ``global_step_3``'s model shard are overwritten (same size); the next start,
   asked for 4 steps, refuses that checkpoint by its checksum, says why, resumes after step 2
   and trains steps 3 and 4; the records of step 3 it replaces go to a dated side file.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from verl_ascend.run import checkpoints, files, run_guard
from tests.recipe.fault_helpers import SMALL_STEPS, RecipeRun, read_jsonl, recipe_env, train_steps
from tests.recipe.helpers import run_recipe

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)

OVERRIDES = SMALL_STEPS
START_TIMEOUT = 900  # start-up on a loaded 2-core machine
SHARD = "actor/model_world_size_1_rank_0.pt"


@pytest.fixture(scope="module")
def scenario(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("guard")
    run_dir, ckpt = out / "dapo_tiny_cpu", out / "checkpoints" / "dapo_tiny_cpu"
    env = recipe_env(tiny_dir, out)
    seen: dict = {"out": out, "run_dir": run_dir, "ckpt": ckpt}

    first = RecipeRun([*OVERRIDES, "trainer.total_training_steps=3"], env, out / "first.log")
    try:
        # A holds the lock from the moment it is committed to start (owner.json written), through
        # Ray's start-up and every step: B starts then, and must be refused while A lives.
        first.wait_for(lambda: (run_dir / run_guard.OWNER_FILE).exists(), START_TIMEOUT)
        seen["first_alive_when_second_started"] = first.alive()
        seen["second"] = run_recipe([*OVERRIDES, "trainer.total_training_steps=3"], tiny_dir, out)
        seen["first_alive_when_second_ended"] = first.alive()
        seen["first_rc"] = first.wait(START_TIMEOUT)
    finally:
        if first.alive():
            first.kill_tree()
    seen["first_pid"], seen["first_log"] = first.proc.pid, first.output()
    seen["steps_after_first"] = train_steps(run_dir)
    seen["owner_after_first"] = json.loads((run_dir / run_guard.OWNER_FILE).read_text())

    shard = ckpt / "global_step_3" / SHARD
    size = shard.stat().st_size
    with open(shard, "r+b") as f:  # a bad sector / partial overwrite: same size, other bytes
        f.seek(size // 2)
        f.write(b"\xff" * 4096)
    seen["shard_size_kept"] = shard.stat().st_size == size
    third = run_recipe([*OVERRIDES, "trainer.total_training_steps=4"], tiny_dir, out, timeout=START_TIMEOUT)
    seen["third"] = third
    return seen


def test_second_run_on_the_same_folder_exits_at_once_naming_the_first(scenario):
    second = scenario["second"]
    text = second.stdout + second.stderr
    assert scenario["first_alive_when_second_started"] and scenario["first_alive_when_second_ended"]
    assert second.returncode == 2, text[-3000:]
    assert "another run is using" in text and f"PID {scenario['first_pid']}" in text, text[-3000:]
    assert f"host {socket.gethostname()}" in text
    assert "Traceback" not in text and "ray init kwargs" not in text


def test_first_run_finishes_with_each_step_once(scenario):
    assert scenario["first_rc"] == 0, scenario["first_log"][-4000:]
    assert scenario["steps_after_first"] == [1, 2, 3]
    assert scenario["owner_after_first"]["pid"] == scenario["first_pid"]


def test_same_size_corrupted_shard_falls_back_with_the_reason(scenario):
    third = scenario["third"]
    text = third.stdout + third.stderr
    assert scenario["shard_size_kept"]
    assert third.returncode == 0, text[-4000:]
    assert "global_step_3 is damaged" in text and f"{SHARD} does not match its sha256 checksum" in text, text[-4000:]
    assert "resuming after step 2" in text
    ckpt = scenario["ckpt"]
    assert (ckpt / "global_step_3.incomplete").is_dir()  # kept for inspection, out of upstream's way
    for step in (1, 2, 3, 4):
        assert checkpoints.verify_marked(str(ckpt / f"global_step_{step}"), step, content=True) is None
    record = read_jsonl(scenario["run_dir"] / files.RESUME_LOG)[-1]
    assert record["resume_step"] == 2 and "checksum" in record["rejected"]["3"]


def test_metrics_hold_each_step_once_and_replaced_records_are_kept(scenario):
    run_dir = scenario["run_dir"]
    assert train_steps(run_dir) == [1, 2, 3, 4]
    side = [p for p in os.listdir(run_dir) if p.startswith("metrics.trimmed-")]
    assert len(side) == 1
    assert [r["step"] for r in read_jsonl(run_dir / side[0]) if "critic/score/mean" in r.get("data", {})] == [3]
    # The rollout-group ledger is trimmed the same way: step 3's groups appear for one run only.
    groups = read_jsonl(run_dir / "rollout_groups.jsonl")
    assert groups and sorted({g["step"] for g in groups}) == [1, 2, 3, 4]
    assert any(p.startswith("rollout_groups.trimmed-") for p in os.listdir(run_dir))
