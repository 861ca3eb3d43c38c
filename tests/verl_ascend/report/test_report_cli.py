"""The report command end to end: on real CPU torch.profiler traces in upstream's layout, on damaged
inputs (clear errors, partial results, exit status) and on missing inputs (nothing written)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, cpu_op, kernel, write_metrics, write_trace

from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.report.report import main

PNG = b"\x89PNG\r\n\x1a\n"


def _load(out):
    return json.loads((out / "report.json").read_text())


def test_report_on_real_cpu_traces(real_cpu_run, tmp_path, capsys):
    out = tmp_path / "rep"
    # every op listed: which ops make the top 15 by self time depends on the machine's load
    rc = main([str(real_cpu_run["save_path"]), str(real_cpu_run["metrics"]), "--out", str(out), "--top", "1000"])
    printed = capsys.readouterr().out
    assert rc == OK
    d = _load(out)
    kinds = sorted(t["kind"] for t in d["inputs"]["traces"])
    assert kinds == ["rollout"] * 3 + ["train"] * 2
    assert not d["problems"]

    # Phases come from the metrics log: train = old_log_prob + update_actor, rollout = gen.
    ph = d["phases"]
    assert ph["source"] == "metrics" and ph["steps"] == [1, 2]
    assert ph["train_s"] == pytest.approx(1.5) and ph["rollout_s"] == pytest.approx(4.0)
    assert ph["rollout_per_train"] == pytest.approx(4.0 / 1.5)
    assert "train : rollout = 1 : 2.67" in printed

    # Rollout: one round (step 1) of three replicas; replica 2 ran 24x longer than the others.
    tail = d["rollout_tail"]
    (rnd,) = tail["rounds"]
    assert rnd["step"] == 1 and rnd["n_lanes"] == 3
    assert sorted(l["label"] for l in rnd["lanes"]) == ["replica0/rank0", "replica1/rank1", "replica2/rank2"]
    assert 0 < rnd["tail_fraction"] <= 1 and 0 < rnd["straggler_fraction"] <= 1
    assert rnd["tail_s"] <= rnd["wall_s"] and tail["tail_fraction"] == rnd["tail_fraction"]

    # Real op counts: every Linear call shows up as one aten::linear.
    rows = {r["name"]: r for r in d["top_ops"]["train"]["rows"]}
    assert d["top_ops"]["train"]["basis"] == "host ops (self time)"
    assert rows["aten::linear"]["count"] == real_cpu_run["train_linear_calls"]
    rrows = {r["name"]: r for r in d["top_ops"]["rollout"]["rows"]}
    assert rrows["aten::linear"]["count"] == real_cpu_run["rollout_linear_calls"]
    # Training stages recorded by upstream's discrete torch profiler (one file per stage).
    stages = {k for lane in d["lanes"] if lane["kind"] == "train" for k in lane["stages_s"]}
    assert stages == {"actor_compute_log_prob", "actor_update"}

    for kind in ("rollout", "train"):
        split = d["time_split"][kind]
        assert 0 <= split["free_fraction"] < 1 and split["basis"] == ["host ops"]
        assert split["comm_s"] == 0
    assert {i["status"] for i in d["checklist"]} == {"n/a"}  # CPU: nothing to judge

    for name in ("rollout_timeline.png", "step_breakdown.png"):
        assert (out / name).read_bytes()[:8] == PNG
    assert (out / "report.txt").read_text().startswith("verl-ascend profile report")
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]


def test_truncated_trace_gives_partial_results_and_is_refused(tmp_path, capsys):
    good = write_trace(tmp_path / "run" / "agent_loop_rollout_replica_0" / "a.json",
                       [kernel("decode", i * 10, 8) for i in range(50)])
    text = good.read_text()
    bad = tmp_path / "run" / "agent_loop_rollout_replica_1" / "b.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(text[: len(text) // 2])
    out = tmp_path / "rep"
    rc = main([str(tmp_path / "run"), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == REFUSED
    assert f"error: {bad} (byte " in err and "cut off" in err and "[partial data kept]" in err
    d = _load(out)
    (problem,) = d["problems"]
    assert problem["path"] == str(bad) and problem["partial"] and problem["offset"] > 0
    partial = [t for t in d["inputs"]["traces"] if t["path"] == str(bad)][0]
    assert partial["partial"] and 0 < partial["events"] < 50


def test_unreadable_trace_is_named_and_others_still_reported(tmp_path, capsys):
    write_trace(tmp_path / "ok_step1_rank0.json", [cpu_op("aten::mm", 0, 5)])
    (tmp_path / "broken_trace.json").write_text("this is not json")
    rc = main([str(tmp_path), "--out", str(tmp_path / "rep"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == REFUSED
    assert "broken_trace.json (byte 0): starts with 't'" in err and "Chrome trace" in err
    assert _load(tmp_path / "rep")["top_ops"]["train"]["rows"][0]["name"] == "aten::mm"


def test_json_files_that_are_not_traces_are_skipped(tmp_path):
    write_trace(tmp_path / "profile" / "t.json", [cpu_op("aten::mm", 0, 5)])
    ckpt = tmp_path / "checkpoints" / "global_step_1" / "huggingface"
    ckpt.mkdir(parents=True)
    (ckpt / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"ph": 1, "traceEvents": 2}}}))
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    rep_out = tmp_path / "rep"
    assert main([str(tmp_path), "--out", str(rep_out), "--quiet"]) == OK
    d = _load(rep_out)
    assert [t["path"] for t in d["inputs"]["traces"]] == [str(tmp_path / "profile" / "t.json")]
    assert str(ckpt / "tokenizer.json") in d["inputs"]["skipped"]


def test_strict_writes_nothing_on_damage(tmp_path):
    write_trace(tmp_path / "ok.json", [cpu_op("aten::mm", 0, 5)])
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "data": {"timing_s/gen": 1}}) + "\n{oops\n")
    out = tmp_path / "rep"
    assert main([str(tmp_path), "--out", str(out), "--strict", "--quiet"]) == REFUSED
    assert not out.exists()


def test_missing_trace_directory_is_a_clear_failure(tmp_path, capsys):
    out = tmp_path / "rep"
    rc = main([str(tmp_path / "outputs" / "profile"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == REFUSED
    assert f"{tmp_path / 'outputs' / 'profile'}: does not exist" in err
    assert "nothing to report" in err
    assert not out.exists()


def test_empty_directory_is_a_clear_failure(tmp_path, capsys):
    (tmp_path / "profile").mkdir()
    assert main([str(tmp_path / "profile"), "--quiet"]) == REFUSED
    assert "nothing to report" in capsys.readouterr().err
    assert not (tmp_path / "profile" / "profile_report").exists()


def test_bad_settings_file(tmp_path, capsys):
    write_trace(tmp_path / "t.json", [cpu_op("aten::mm", 0, 5)])
    settings = tmp_path / "s.yaml"
    settings.write_text("communication_patterns: ['(unclosed']\n")
    assert main([str(tmp_path), "--settings", str(settings)]) == REFUSED
    err = capsys.readouterr().err
    assert str(settings) in err and "not a valid regex" in err


def test_metrics_only_report(tmp_path):
    log = write_metrics(tmp_path / "metrics.jsonl", {3: {"gen": 9.0, "update_actor": 2.0, "old_log_prob": 1.0,
                                                        "step": 13.0}})
    out = tmp_path / "rep"
    assert main([str(log), "--out", str(out), "--quiet"]) == OK
    d = _load(out)
    assert d["phases"]["rollout_per_train"] == pytest.approx(3.0)
    assert d["rollout_tail"]["rounds"] == []
    assert (out / "step_breakdown.png").read_bytes()[:8] == PNG and not (out / "rollout_timeline.png").exists()


def test_the_command_in_a_fresh_interpreter(tmp_path):
    """``python -m verl_ascend report`` (what ``verl-ascend report`` runs), in a fresh interpreter started
    outside the checkout, finds its own modules."""
    write_trace(tmp_path / "t.json.gz", [kernel("RmsNorm", 0, 5), kernel("SwiGlu", 10, 5)], gz=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "verl_ascend", "report", str(tmp_path), "--no-plots"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == OK, proc.stderr
    assert "5. Top kernels / ops" in proc.stdout and "RmsNorm" in proc.stdout
    d = json.loads((tmp_path / "profile_report" / "report.json").read_text())
    assert d["top_ops"]["train"]["rows"][0]["count"] == 1
    shutil.rmtree(tmp_path / "profile_report")


def test_report_imports_no_upstream_verl_nor_torch():
    """``verl_ascend`` lives outside upstream's ``verl`` namespace: importing the report CLI must not run
    upstream's ``verl/__init__`` (torch, Ray), so no re-exec is needed to keep the report lean."""
    code = ("import sys, verl_ascend.cli, verl_ascend.report.report, verl_ascend.report.offline; "
            "print(sorted(m for m in ('verl', 'torch', 'ray') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_an_output_folder_it_cannot_write_is_a_failed_command(tmp_path, capsys):
    """1 (FAILED) is the tool breaking, not the input: the inputs were read, the report could not be written."""
    write_trace(tmp_path / "t.json", [cpu_op("aten::mm", 0, 5)])
    (tmp_path / "a_file").write_text("")
    assert main([str(tmp_path / "t.json"), "--out", str(tmp_path / "a_file" / "rep"), "--quiet"]) == FAILED
    assert f"cannot write the report to {tmp_path / 'a_file' / 'rep'}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "settings_text", "expected"),
    [
        (["--top", "-5"], None, "--top: '-5': accepted: an integer >= 1"),
        (["--top", "0"], None, "--top: '0': accepted: an integer >= 1"),
        ([], "top_n: -3\n", "top_n=-3; accepted: an integer >= 1"),
        ([], "top_n: many\n", "top_n='many'; accepted: an integer >= 1"),
        ([], "top_n: 5\ntop_kernels: 3\n", "unknown key(s) top_kernels"),
        ([], "tail:\n  running_belwo: 0.3\n", "unknown key(s) tail.running_belwo"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(tmp_path, capsys, args, settings_text, expected):
    if settings_text is not None:
        settings = tmp_path / "s.yaml"
        settings.write_text(settings_text)
        args = [*args, "--settings", str(settings)]
    try:
        rc = main([str(tmp_path), *args])
    except SystemExit as exc:  # argparse: exit 2 with the message on stderr
        rc = exc.code
    assert rc != 0
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "profile_report").exists()
