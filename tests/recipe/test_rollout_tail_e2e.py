"""The rollout-tail policy in real runs: upstream trainer, Ray, the long-tail workload, on both CPU
rollout engines (verl.cpu's HF server, and upstream's vLLM server on vLLM's CPU build: there the cut
goes through vLLM's own abort path and the carried tokens are resubmitted to vLLM).

Carry-over on: the step stops at 4 useful groups (the workload's batch), stragglers are aborted
and resumed the next step; every prompt group is trained once, filtered, or still in flight at
the end (the ``rollout_groups.jsonl`` ledger); steps that train carried-over tokens show it in
the rollout/actor log-prob comparison, steps that do not stay on-policy. Carry-over off: aborted
groups are dropped and nothing trained was ever resumed.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections import defaultdict

import pytest

from tests.recipe.helpers import run_recipe

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)

STEPS = 5
BATCH = 4
TAIL = "trainer.v1.dapo_ascend.rollout_tail"


@pytest.fixture(scope="session")
def tail_dir(tmp_path_factory):
    from recipe.dapo_ascend.tiny.assets import build

    # Answers that run on (a digit stops with probability 1/10, median ~6 tokens) rather than the
    # benchmark's one digit: the cut then finds short responses mid-generation, and their carried
    # tokens are trained (the hard groups' never are: they are filtered out).
    return build(tmp_path_factory.mktemp("tail") / "assets", workload="tail", long_tail={"stop_after_digit": 0.1})


# The server holds at most 16 sequences (as a KV-cache-bound server does): the rest queue, so the
# cut always finds requests to abort. With 256 slots this small model finishes every request
# before the agent loops have even scored them, and there is nothing left to cut.
SERVER_SLOTS = "actor_rollout_ref.rollout.max_num_seqs=16"
# Long responses capped at 96 tokens (the benchmark's 448 make every training step several times
# slower; what these tests check does not depend on how far the long ones run).
SHORT_CAP = "data.max_response_length=96"


# The vLLM run is end to end on vLLM's CPU build, which CI installs (make test).
VLLM = pytest.param(
    "vllm",
    marks=[
        pytest.mark.e2e,
        pytest.mark.slow,  # the hf run carries the tail in CI; this one through vLLM's abort (make test-e2e-full)
        pytest.mark.skipif(
            importlib.util.find_spec("vllm") is None and not os.environ.get("CI"),
            reason="vLLM's CPU build not installed (make vllm)",
        ),
    ],
)


def _run(tail_dir, out, steps, extra):
    overrides = [
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "fault_tolerance.allow_no_checkpoints=true", f"{TAIL}.enable=true", SERVER_SLOTS, SHORT_CAP,
        *extra
    ]
    result = run_recipe(overrides, tail_dir, out, timeout=1200, config="dapo_tail_cpu",
                        env={"VERL_ASCEND_TAIL_DIR": str(tail_dir)})
    assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-4000:])
    run_dir = out / "dapo_tail_cpu"
    metrics = [json.loads(x)["data"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [d for d in metrics if "critic/score/mean" in d]
    ledger = [json.loads(x) for x in (run_dir / "rollout_groups.jsonl").read_text().splitlines()]
    return metrics, ledger


@pytest.fixture(scope="module", params=["hf", VLLM])
def carried(tail_dir, tmp_path_factory, request):
    engine = f"actor_rollout_ref.rollout.name={request.param}"
    extra = [f"{TAIL}.over_provision=2.0", f"{TAIL}.carry_over=true", engine]
    return _run(tail_dir, tmp_path_factory.mktemp("tail_on"), STEPS, extra)


@pytest.fixture(scope="module")
def dropped(tail_dir, tmp_path_factory):
    return _run(tail_dir, tmp_path_factory.mktemp("tail_drop"), 3, [])  # the default: carry_over=false


def _fates(ledger):
    by_event = defaultdict(list)
    per_step = defaultdict(dict)
    for rec in ledger:
        by_event[rec["event"]].extend(rec["uids"])
        per_step[rec["step"]][rec["event"]] = rec["uids"]
    return by_event, per_step


def test_no_group_is_lost_or_trained_twice(carried):
    metrics, ledger = carried
    events, per_step = _fates(ledger)
    assert sorted(per_step) == list(range(1, STEPS + 1))
    for step, fate in per_step.items():
        assert len(fate["trained"]) == BATCH, f"step {step} trained {len(fate['trained'])} groups"
    trained = events["trained"]
    assert len(trained) == len(set(trained)) == STEPS * BATCH
    submitted = set(events["submitted"])
    assert len(submitted) == len(events["submitted"])
    submitted_at = {u: step for step, fate in per_step.items() for u in fate.get("submitted", [])}
    filtered, dropped = set(events["filtered"]), set(events["dropped"])
    assert not filtered & set(trained) and not dropped & set(trained)
    # Surplus is dropped oldest-last: every group trained at that step is at least as old.
    for step, fate in per_step.items():
        if fate.get("dropped"):
            newest_trained = max(submitted_at[u] for u in fate["trained"])
            assert all(submitted_at[u] >= newest_trained for u in fate["dropped"])
    still_live = set(per_step[STEPS]["carried"])
    # Every group ever submitted was trained, filtered by dynamic sampling, dropped as surplus,
    # or is still in flight.
    assert submitted == set(trained) | filtered | dropped | still_live
    for step, fate in per_step.items():
        assert all(step - submitted_at[u] <= 1 for u in fate["trained"])
    # Each trained step used the full rollout.n samples of every group.
    for d in metrics:
        assert d["response_length/max"] <= 96


def test_the_tail_is_cut_and_carried_tokens_are_resumed_and_trained(carried):
    metrics, _ = carried
    assert sum(d["rollout_tail/aborted_requests"] for d in metrics) > 0
    assert sum(d["rollout_tail/carried_groups"] for d in metrics) > 0
    carried = [d for d in metrics if d["rollout_tail/carried_tokens"] > 0]
    assert carried, "no carried-over tokens were ever trained"
    for d in carried:
        assert d["rollout_tail/staleness/max"] == 1  # bounded by max_staleness
        assert 0 < d["rollout_tail/off_policy_token_fraction"] <= 1
    # A response aborted mid-generation was resumed and trained.
    assert sum(d["rollout_tail/resumed_responses"] for d in metrics) > 0


def test_off_policy_spans_show_in_the_rollout_actor_comparison(carried):
    """Tokens sampled by the previous step's weights differ from the actor's current log-probs;
    steps with no carried token stay on-policy to float32 noise."""
    metrics, _ = carried
    for d in metrics:
        diff = d["training/rollout_probs_diff_max"]
        if d["rollout_tail/carried_tokens"] > 0:
            assert diff > 1e-4, d
        elif d["rollout_tail/staleness/max"] == 0:
            assert diff < 1e-4, d


def test_without_carry_over_aborted_groups_are_dropped(dropped):
    metrics, ledger = dropped
    events, per_step = _fates(ledger)
    assert all(len(f["trained"]) == BATCH for f in per_step.values())
    assert not set(events["dropped"]) & set(events["trained"])
    for d in metrics:
        assert d["rollout_tail/carried_tokens"] == 0 and d["rollout_tail/resumed_responses"] == 0
        assert d["rollout_tail/staleness/max"] == 0 and d["training/rollout_probs_diff_max"] < 1e-4
    assert sum(d["rollout_tail/dropped_groups"] for d in metrics) > 0
