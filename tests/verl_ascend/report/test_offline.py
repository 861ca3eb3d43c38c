"""Offline parsing: a clear failure where torch_npu is absent, and the right call where it is."""

from __future__ import annotations

import sys
import types

import pytest

from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.report import offline


def _raw_dirs(root, n):
    for i in range(n):
        (root / "agent_loop_rollout_replica_0" / f"host_{i}_2026_ascend_pt" / "PROF_000001_x").mkdir(parents=True)
    return root


def test_without_torch_npu_it_fails_clearly(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import torch_npu -> ImportError, here and on any CPU host
    _raw_dirs(tmp_path, 1)
    assert offline.main([str(tmp_path)]) == REFUSED
    err = capsys.readouterr().err
    assert "torch_npu is not installed here" in err and "Ascend host" in err


def test_nothing_to_parse(tmp_path, capsys):
    assert offline.main([str(tmp_path)]) == REFUSED
    assert "no *_ascend_pt directory" in capsys.readouterr().err
    assert offline.main([str(tmp_path / "missing")]) == REFUSED
    assert "does not exist" in capsys.readouterr().err


def test_bad_process_count(tmp_path):
    _raw_dirs(tmp_path, 1)
    with pytest.raises(offline.OfflineParseError, match="at least 1"):
        offline.analyse_offline(tmp_path, processes=0, analyse=lambda **kw: None)


def _fake_torch_npu(monkeypatch, calls, with_export_type=True, make_output=True):
    def analyse(profiler_path, max_process_number=None, export_type=None):
        calls.append({"profiler_path": profiler_path, "max_process_number": max_process_number,
                      "export_type": export_type})
        if make_output:
            from pathlib import Path

            for d in Path(profiler_path).glob("*_ascend_pt"):
                (d / "ASCEND_PROFILER_OUTPUT").mkdir(exist_ok=True)

    if not with_export_type:
        def analyse(profiler_path, max_process_number=None, _inner=analyse):  # noqa: F811
            _inner(profiler_path, max_process_number)

    pkg = types.ModuleType("torch_npu")
    prof = types.ModuleType("torch_npu.profiler")
    mod = types.ModuleType("torch_npu.profiler.profiler")
    mod.analyse = analyse
    pkg.profiler, prof.profiler = prof, mod
    for name, m in (("torch_npu", pkg), ("torch_npu.profiler", prof), ("torch_npu.profiler.profiler", mod)):
        monkeypatch.setitem(sys.modules, name, m)


def test_calls_torch_npu_analyse_with_process_count_and_text_export(tmp_path, monkeypatch, capsys):
    calls = []
    _fake_torch_npu(monkeypatch, calls)
    _raw_dirs(tmp_path, 3)
    assert offline.main([str(tmp_path), "--processes", "2"]) == OK
    assert calls == [{"profiler_path": str(tmp_path / "agent_loop_rollout_replica_0"), "max_process_number": 2,
                      "export_type": ["text"]}]
    assert f"verl-ascend report {tmp_path}" in capsys.readouterr().out


def test_default_process_count_is_bounded_by_directories(tmp_path, monkeypatch):
    calls = []
    _fake_torch_npu(monkeypatch, calls)
    _raw_dirs(tmp_path, 1)
    assert offline.main([str(tmp_path)]) == OK
    assert calls[0]["max_process_number"] == 1


def test_old_torch_npu_without_export_type(tmp_path, monkeypatch):
    calls = []
    _fake_torch_npu(monkeypatch, calls, with_export_type=False)
    _raw_dirs(tmp_path, 2)
    assert offline.main([str(tmp_path), "-j", "4"]) == OK
    assert calls[0]["max_process_number"] == 4 and calls[0]["export_type"] is None


def test_directories_left_unparsed_are_named(tmp_path, monkeypatch, capsys):
    calls = []
    _fake_torch_npu(monkeypatch, calls, make_output=False)
    _raw_dirs(tmp_path, 1)
    assert offline.main([str(tmp_path)]) == FAILED
    assert "still no ASCEND_PROFILER_OUTPUT" in capsys.readouterr().err
