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
