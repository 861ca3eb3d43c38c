"""The recipe trainer's per-step agent-loop timings (read by benchmarks/embedded_default.py)."""

from __future__ import annotations

import numpy as np
import pytest


def test_agent_loop_timings_over_trained_samples_only():
    from recipe.dapo_ascend.trainer import agent_loop_timings

    samples = [
        {"generate_sequences": 0.5, "compute_score": 0.1, "tool_calls": 0.0},
        {"generate_sequences": 1.5, "compute_score": 0.3},
        {"generate_sequences": 9.0, "compute_score": 9.0},  # padding: not trained
        None,  # a sample without metrics
    ]
    out = agent_loop_timings(samples, mask=np.array([True, True, False, True]))
    assert out == {
        "agent_loop/generate_sequences/mean": pytest.approx(1.0),
        "agent_loop/generate_sequences/max": pytest.approx(1.5),
        "agent_loop/compute_score/mean": pytest.approx(0.2),
        "agent_loop/compute_score/max": pytest.approx(0.3),
    }
    assert agent_loop_timings([None, {}]) == {}


def test_sampled_mean_adds_back_the_groups_dynamic_sampling_dropped():
    from recipe.dapo_ascend.trainer import sampled_mean

    # Trained batch: 2 mixed groups of 8 at mean 0.75 (12 of 16 right). Dropped: 4 all-right
    # groups and 1 all-wrong group, as upstream's replay buffer reports them ({value: groups}).
    value = sampled_mean(0.75, 16, {1.0: 4, 0.0: 1}, group_size=8)
    assert value == pytest.approx((12 + 4 * 8) / (16 + 5 * 8))  # 44 right of 56 sampled
    # Nothing filtered: the trained batch is everything sampled.
    assert sampled_mean(0.4, 32, None, group_size=8) == pytest.approx(0.4)
    assert sampled_mean(0.4, 32, {}, group_size=8) == pytest.approx(0.4)
    # No acc logged this step: nothing to report.
    assert sampled_mean(None, 16, {1.0: 2}, group_size=8) is None


def test_progress_line_shows_the_sampled_accuracy_when_logged():
    from verl_ascend.run.progress import format_step

    base = {"critic/score/mean": 0.5, "reward_extra/acc/mean": 0.625, "response_length/mean": 2.0}
    assert "sampled acc" not in format_step({"step": 1, "data": base})
    line = format_step({"step": 2, "data": {**base, "reward_extra/acc/sampled_mean": 0.9}})
    assert "acc 0.625 | sampled acc 0.900 | resp_len 2.0" in line
