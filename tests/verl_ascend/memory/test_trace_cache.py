"""The traced training peaks are cached on disk by shape and package versions (a 32B trace is ~90 s of CPU).

Real files in a temporary cache folder; the trace itself is counted, not mocked away: the first call
traces, a second process-fresh call (the in-process cache cleared) reads the file and returns the same
Trace, a damaged file is traced again, and ``VERL_ASCEND_MEMORY_CACHE=0`` writes nothing.
"""

from __future__ import annotations

import json

import pytest

from verl_ascend.memory import train_trace
from verl_ascend.memory.train_step import StepShape

SHAPE = StepShape(architecture=json.dumps({"model_type": "qwen2", "num_hidden_layers": 2}, sort_keys=True),
                  world_size=2, sp=1, tokens=64, seq_len=16, response_len=8)
FAKE = train_trace.Trace(peak=123, kinds=(("Sharded Param", 100), ("Activation", 23)), where="('bw', [], False)")


@pytest.fixture
def counted(monkeypatch):
    calls = []
    monkeypatch.setattr(train_trace, "_trace", lambda shape: (calls.append(shape), FAKE)[1])
    train_trace.trace.cache_clear()
    yield calls
    train_trace.trace.cache_clear()


def test_second_plan_of_a_shape_reads_the_cache(tmp_path, monkeypatch, counted):
    monkeypatch.setenv(train_trace.CACHE_ENV, str(tmp_path))
    assert train_trace.trace(SHAPE) == FAKE and len(counted) == 1
    (written,) = tmp_path.glob("trace-v*.json")
    train_trace.trace.cache_clear()  # a new process
    assert train_trace.trace(SHAPE) == FAKE and len(counted) == 1
    other = StepShape(**{**SHAPE.__dict__, "tokens": 128})
    train_trace.trace(other)
    assert len(counted) == 2 and len(list(tmp_path.glob("trace-v*.json"))) == 2  # another shape, another key
    written.write_text("{torn")
    train_trace.trace.cache_clear()
    assert train_trace.trace(SHAPE) == FAKE and len(counted) == 3  # damaged: traced again, and rewritten
    assert json.loads(written.read_text())["peak"] == 123


def test_cache_off(tmp_path, monkeypatch, counted):
    monkeypatch.setenv(train_trace.CACHE_ENV, "0")
    monkeypatch.setenv("HOME", str(tmp_path))
    train_trace.trace(SHAPE)
    train_trace.trace.cache_clear()
    train_trace.trace(SHAPE)
    assert len(counted) == 2 and not list(tmp_path.rglob("trace-v*.json"))


def test_an_unwritable_cache_folder_still_plans(tmp_path, monkeypatch, counted):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(train_trace.CACHE_ENV, str(blocker))
    assert train_trace.trace(SHAPE) == FAKE
