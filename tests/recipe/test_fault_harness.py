"""scripts/fault_harness.py: its invariant checks on real run folders (each must be able to fail), its
command line, and (e2e) one fault driven through a real tiny run with the JSON result it writes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.recipe.helpers import REPO

SCRIPT = REPO / "scripts" / "fault_harness.py"


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("fault_harness", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _lab(harness, tmp_path, metrics=(), prompts=(), eras=None, resumes=(), marked=(), unmarked=()):
    lab = harness.Lab(tmp_path / "lab", tmp_path / "tiny")
    lab.run_dir.mkdir(parents=True)
    lines = lambda rows: "".join(json.dumps(r) + "\n" for r in rows)  # noqa: E731
    (lab.run_dir / "metrics.jsonl").write_text(lines({"step": s, "data": {"critic/score/mean": 0.5}} for s in metrics))
    (lab.run_dir / "prompts.jsonl").write_text(lines({"step": s, "index": ix} for s, ix in prompts))
    (lab.run_dir / "resume.jsonl").write_text(lines({"resume_step": s} for s in resumes))
    if eras is not None:
        (lab.run_dir / "data_order.json").write_text(json.dumps({"eras": [{"after_step": e} for e in eras]}))
    for step in (*marked, *unmarked):
        folder = lab.ckpt / f"global_step_{step}"
        folder.mkdir(parents=True)
        if step in marked:
            (folder / harness.MARKER).write_text("{}")
    return lab


def test_metrics_once(harness, tmp_path):
    lab = _lab(harness, tmp_path, metrics=[1, 2, 2, 3])
    check = harness.check_metrics_once(lab)
    assert not check.ok and "[2]" in check.detail
    lab = _lab(harness, tmp_path / "b", metrics=[1, 3])
    lab.finished = True
    assert not harness.check_metrics_once(lab).ok  # step 2's row lost
    lab = _lab(harness, tmp_path / "c", metrics=[1, 2, 3])
    lab.finished = True
    assert harness.check_metrics_once(lab).ok


def test_prompts_once_per_data_era(harness, tmp_path):
    twice = _lab(harness, tmp_path, prompts=[(1, [4, 5]), (2, [6]), (3, [5])])
    check = harness.check_prompts_once(twice)
    assert not check.ok and "prompt 5: step 1 and step 3" in check.detail
    # After a fresh data order (an era beginning after step 2) the new file may repeat an index.
    fresh = _lab(harness, tmp_path / "b", prompts=[(1, [4, 5]), (2, [6]), (3, [5])], eras=[0, 2])
    assert harness.check_prompts_once(fresh).ok


def test_resumed_only_marked(harness, tmp_path):
    lab = _lab(harness, tmp_path, resumes=[0, 2], marked=[1], unmarked=[2])
    lab.finished = True
    check = harness.check_resumed_only_marked(lab)
    assert not check.ok and "resumed global_step_2, which carries no" in check.detail
    assert "global_step_2 is left without its marker" in check.detail
    assert harness.check_resumed_only_marked(_lab(harness, tmp_path / "b", resumes=[0, 1], marked=[1, 2])).ok


def test_no_orphans_and_last_line(harness, tmp_path):
    lab = _lab(harness, tmp_path)
    lab.starts = [harness.Start("a", "a.log", rc=2, last_line="[verl-ascend] error: another run is using '/x'",
                                expect=["another run is using"]),
                  harness.Start("b", "b.log", rc=1, last_line="Traceback (most recent call last):", expect=[],
                                survivors=["4242 raylet"])]
    orphans, last = harness.check_no_orphans(lab), harness.check_last_line(lab)
    assert not orphans.ok and "b: 4242 raylet" in orphans.detail
    assert not last.ok and last.detail.startswith("b: last line") and "a: " not in last.detail


def test_list_and_unknown_names():
    run = lambda *a: subprocess.run([sys.executable, str(SCRIPT), *a], capture_output=True, text=True, cwd=REPO)  # noqa: E731
    listed = run("--list")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "kill9_tree", "metrics_unwritable", "marker_deleted", "data_replaced", "second_run", "driver_kill9",
        "driver_sigterm", "driver_sigint", "disk_full", "engine_core_kill", "standalone_server_kill", "worker_oom",
        "mode_changed", "mode_changed_back", "tracker_behind", "bad_values", "marker_checksum"]
    unknown = run("--only", "kill9_tree,nope")
    assert unknown.returncode != 0 and "unknown fault(s) ['nope']" in unknown.stderr and "kill9_tree" in unknown.stderr


def test_a_fault_that_cannot_be_injected_is_skipped_with_its_reason(harness, tmp_path):
    def cannot(lab):
        raise harness.Skip("no tmpfs here")

    record = harness.run_fault(harness.Fault("nowhere", "a fault this machine cannot inject", cannot), tmp_path, tmp_path)
    assert (record["status"], record["reason"], record["checks"]) == ("skipped", "no tmpfs here", [])
    assert "nowhere  skipped" in harness.summary([record])


@pytest.mark.e2e
def test_second_run_fault_through_a_real_run(tiny_dir, tmp_path):
    """The harness drives one fault end to end: a real run, a refused second start, every invariant checked."""
    result = tmp_path / "result.json"
    env = {**os.environ, "VERL_ASCEND_TINY_DIR": str(tiny_dir),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--only", "second_run", "--out", str(tmp_path / "runs"),
                           "--result", str(result), "--tiny-dir", str(tiny_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    (record,) = json.loads(result.read_text())["faults"]
    assert record["status"] == "pass", record
    checks = {c["name"]: c for c in record["checks"]}
    assert {"metrics_once", "prompts_once", "resumed_only_marked", "no_orphans", "last_line", "exit_second"} <= set(checks)
    assert checks["metrics_once"]["detail"] == "steps [1, 2, 3], one row each"
    starts = {s["name"]: s for s in record["starts"]}
    assert starts["second"]["rc"] == 2 and "another run is using" in starts["second"]["last_line"]
    assert "second_run  pass" in proc.stdout  # the summary table
