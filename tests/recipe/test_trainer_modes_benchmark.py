"""``benchmarks/trainer_modes.py``'s arithmetic on known per-step records: steady-state steps/s, the overlap
bound measured on the sync run, staleness, accuracy over the last steps and the time to the target."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("trainer_modes_bench", REPO / "benchmarks" / "trainer_modes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _steps(step_s, gen_s, acc, stale=None):
    out = []
    for i, (s, g, a) in enumerate(zip(step_s, gen_s, acc)):
        data = {"critic/score/mean": a, "reward_extra/acc/mean": a, "timing_s/step": s, "timing_s/gen": g,
                "timing_s/update_weights": 0.1, "timing_s/update_actor": 0.3}
        if stale is not None:
            data["training/off_policy/trajectory_staleness/mean"] = stale[i]
        out.append({"step": i + 1, "data": data})
    return out


def test_summary_of_one_run(bench):
    steps = _steps([9.0, 2.0, 2.0, 2.0], [8.0, 1.5, 1.5, 1.5], [0.5, 0.7, 0.8, 0.9], stale=[0, 1, 0, 1])
    s = bench.summarize(steps, target_acc=0.8)
    assert s["steps_per_s"] == pytest.approx(3 / 6.0)  # step 1 (start-up) left out
    assert s["rollout_s"] == 1.5 and s["train_s"] == 0.5 and s["weight_sync_s"] == 0.1 and s["update_s"] == 0.3
    assert s["staleness"] == pytest.approx(2 / 3)
    assert s["acc_last10"] == pytest.approx(0.725)
    assert s["time_to_target_s"] == pytest.approx(15.0)  # the 3-step mean first reaches 0.8 at step 4


def test_overlap_bound_and_ratios_are_printed_against_sync(bench):
    sync = bench.summarize(_steps([5, 2, 2], [4, 1, 1], [0.5, 0.5, 0.5]), 0.8)  # rollout 1 s, train 1 s
    fast = bench.summarize(_steps([5, 1.25, 1.25], [4, 0.2, 0.2], [0.5, 0.5, 0.5], stale=[0, 1, 1]), 0.8)
    lines = bench.table({"balanced": {"sync": bench.mean_of([sync]), "separate_async": bench.mean_of([fast])}})
    text = "\n".join(lines)
    assert "overlap bound (sync: rollout 1.00 s, train 1.00 s): 1.000 steps/s = 2.00x sync" in text
    assert "balanced separate_async: 1.60x sync steps/s, 80 % of the overlap bound" in text
    assert bench.mean_of([sync, sync])["acc_last10_runs"] == [0.5, 0.5]


def test_balanced_workload_answers_run_to_the_length_limit(tmp_path):
    """``--workload steady`` (the balanced workload's assets): no hard prompts, and every answer runs
    on in digits to the token budget, so each step decodes and trains the same number of tokens."""
    import pandas as pd

    from recipe.dapo_ascend.tiny.assets import HARD_MARK, VOCAB, build
    from verl.cpu.rollout.engine import GenerationRequest, HFGenerationEngine, SamplingSpec
    from verl.cpu.rollout.server import load_causal_lm

    root = build(tmp_path / "steady", workload="steady", train_rows=256, val_rows=4)
    contents = [m[0]["content"] for m in pd.read_parquet(root / "data" / "train.parquet")["prompt"]]
    assert len(contents) == 256 and not any(c.endswith(HARD_MARK) for c in contents)
    eng = HFGenerationEngine(load_causal_lm(str(root / "model")), eos_token_ids=[1], pad_token_id=0)
    digits = [VOCAB.index(str(d)) for d in range(10)]
    prompts = [[digits[i % 10], digits[(3 * i) % 10], VOCAB.index("=")] for i in range(32)]
    results = eng.generate([GenerationRequest(str(i), p, SamplingSpec(max_new_tokens=64, seed=i))
                            for i, p in enumerate(prompts)])
    assert [len(r.token_ids) for r in results] == [64] * 32
    assert all(set(r.token_ids) <= set(digits) for r in results)
    # The tail workload's model stops after its first digit: the two differ only in that shape.
    tail = build(tmp_path / "tail", workload="tail", train_rows=8, val_rows=4)
    short = HFGenerationEngine(load_causal_lm(str(tail / "model")), eos_token_ids=[1], pad_token_id=0).generate(
        [GenerationRequest(str(i), p, SamplingSpec(max_new_tokens=64, seed=i)) for i, p in enumerate(prompts)])
    assert sum(len(r.token_ids) == 2 for r in short) >= 30


def test_prompt_ledger_counts_every_prompt_drawn_per_step(bench, tmp_path):
    """The journal's ``prompts.jsonl`` has one line per dataloader chunk; refills add lines to a step; a
    line torn by a kill mid-write is left out, as the journal's own reader does."""
    ledger = tmp_path / "prompts.jsonl"
    ledger.write_text('{"step":1,"index":[4,9]}\n{"step":2,"index":[1]}\n{"step":2,"index":[7,3]}\n{"step":3,"ind')
    assert bench.prompts_drawn(ledger) == {1: 2, 2: 3}
    assert bench.prompts_drawn(tmp_path / "absent.jsonl") == {}


def test_work_matched_bound_follows_the_prompts_each_mode_drew(bench):
    """Dynamic sampling makes a step's rollout work differ between runs: a mode that drew fewer prompts
    than sync is held to the bound for its own draw, at sync's rollout seconds a prompt."""
    sync = bench.summarize(_steps([9, 3, 3], [8, 2.5, 2.5], [0.5] * 3), 0.8, prompts={1: 8, 2: 20, 3: 20})
    assert sync["prompts_per_step"] == 20 and sync["rollout_s_per_prompt"] == pytest.approx(0.125)
    fast = bench.summarize(_steps([9, 1.5, 1.5], [8, 1.0, 1.0], [0.5] * 3), 0.8, prompts={1: 16, 2: 10, 3: 10})
    lines = "\n".join(bench.table({"demo": {"sync": bench.mean_of([sync]), "separate_async": bench.mean_of([fast])}}))
    # Against sync's own rollout (2.5 s a step) it is 167 % of the bound; its 10 prompts are 1.25 s of sync
    # rollout, so for its own work the bound is 0.8 steps/s and it reaches 83 % of it.
    assert "demo separate_async: 2.00x sync steps/s, 167 % of the overlap bound" in lines
    assert "rollout work (prompts drawn a step): sync 20.0, 125 ms of sync rollout a prompt" in lines
    assert "demo separate_async: 10.0 prompts a step; for that work the bound is 0.800 steps/s, 83 % of it" in lines
    # Without a ledger (an older run) the work-matched lines are left out, not guessed.
    bare = bench.summarize(_steps([9, 3, 3], [8, 2.5, 2.5], [0.5] * 3), 0.8)
    assert bare["prompts_per_step"] is None
    assert "rollout work" not in "\n".join(bench.table({"demo": {"sync": bench.mean_of([bare])}}))


def test_per_run_rates_are_listed_when_a_mode_ran_more_than_once(bench):
    a = bench.summarize(_steps([9, 2, 2], [8, 1, 1], [0.5] * 3), 0.8)
    b = bench.summarize(_steps([9, 4, 4], [8, 3, 3], [0.5] * 3), 0.8)
    lines = "\n".join(bench.table({"demo": {"sync": bench.mean_of([a, b])}}))
    assert "demo sync steps/s per run: 0.500, 0.250" in lines


def test_cores_busy_counts_a_spinning_run_between_its_first_and_last_step(bench, tmp_path):
    """``watch_cpu`` reads the machine's busy time when each step's line reaches the metrics file: a run
    that spins one core between its steps shows about one core busy (more if the machine is busy too)."""
    import os
    import subprocess
    import sys

    child = (
        "import json, pathlib, time\n"
        f"m = pathlib.Path({str(tmp_path)!r}) / 'exp' / 'metrics.jsonl'\n"
        "m.parent.mkdir(parents=True)\n"
        "for step in range(1, 5):\n"
        "    end = time.monotonic() + 0.8\n"
        "    while time.monotonic() < end: pass\n"
        "    with open(m, 'a') as f: f.write(json.dumps({'step': step, 'data': {'critic/score/mean': 0}}) + '\\n')\n"
        "    time.sleep(0.3)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child])
    busy = bench.watch_cpu(proc, tmp_path, period_s=0.05)
    assert proc.returncode == 0
    assert 0.5 <= busy <= os.cpu_count() + 0.1

    quiet = subprocess.Popen([sys.executable, "-c", "pass"])  # no step line: nothing to measure over
    assert bench.watch_cpu(quiet, tmp_path / "none", period_s=0.05) is None


@pytest.mark.parametrize("argv, named", [
    (["--steps", "1"], "--steps 1"), (["--repeats", "0"], "--repeats 0"), (["--workloads", "nope"], "'nope'"),
    (["--workloads", "sync"], "--workloads sync: unknown 'sync'; accepted: a comma-separated list of ['demo'"),
    (["--modes", "sync,demo"], "--modes sync,demo: unknown 'demo'; accepted: a comma-separated list of ['sync', "
                               "'colocate_async', 'separate_async']"),
])
def test_bad_arguments_exit_2_naming_the_value_and_what_is_accepted_before_any_run(bench, argv, named, capsys,
                                                                                     monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("built assets or launched a run before refusing the arguments")

    monkeypatch.setattr(bench, "assets", started)
    monkeypatch.setattr(bench, "run_once", started)
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "accepted" in err
