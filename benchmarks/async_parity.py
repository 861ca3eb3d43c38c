"""Does asynchrony keep accuracy? Sync against each async arm, seeded, on a task with headroom.

The task, and how it was chosen: the demo's own task and model (same_digit, tiny/task.py),
started colder. The demo's base model (``demo_model``: 36 supervised warm-up steps, ``BASE_WARMUP``)
samples the right digit ~0.7 of the time, so the demo cannot show a rise, and its per-step accuracy
swings by 0.1 between runs. Warming the same random model up for 18 steps instead leaves ~0.3 (exact
expectation over 400 prompts: 16 steps 0.27, 18 steps 0.31, 20 steps 0.36, 36 steps 0.71), and DAPO
with the demo's settings lifts that to ~0.9 within 20 steps (sync, measured). Dynamic sampling is off
(``algorithm.filter_groups.enable=false``) so every arm samples and trains the same 8 prompts x 16
responses a step: the same data (``data.seed`` orders it) and the same sample budget in every arm.
The primary metric is the accuracy of every sampled response (``reward_extra/acc/mean``: nothing is
filtered out, so the trained batch is the sampled one).

Arms (``ARMS``): sync; colocate_async; separate_async with its staleness bound at 0, 1 and 3 model
versions (upstream's ``trainer.v1.sampler.max_off_policy_threshold`` counts the versions a trajectory may
span, so a bound of b is a threshold of b + 1; upstream's default is 8). The rollout runs ahead by the
prefetch window (``num_warmup_batches``, 1 by default), so with the default window samples are at most 1
version old and a bound above 1 never binds (benchmarks/trainer_modes.py: staleness 0.81 on average at
upstream's bound of 8; tests/recipe/test_trainer_modes_e2e.py asserts a maximum of 1); the bound-3 arms open
the window to 3 batches. The bound of 3 again with upstream's rollout correction on: its ``decoupled_token_is``
preset (old log-probs recomputed, token-level importance weights truncated at 2). Every other arm runs the
demo's ``bypass_mode=true`` (the rollout's log-probs are the old policy's). Upstream's V1 trainer applies no
correction in bypass mode (``trainer_base.py``: the old log-probs are the rollout's and the correction runs only
when not bypassed), so the correction arm must recompute: on the CPU that needs the π_old copy of issue 38 item 5
(``verl/cpu/snapshots.py``). ``separate_async_b3_rs`` (bypass with upstream's K3 rejection) is kept for
``--arms`` only: it trains exactly as the bound-3 arm and logs no ``rollout_corr/*``. Each arm runs ``--seeds``
(``data.seed``, which also seeds the sampling).

Per arm it prints steps/s and wall time, then against sync (``verl-ascend parity``'s analysis: final =
mean of the last 3 steps, max, area under the curve, each candidate - baseline with a 95 % bootstrap
interval over runs) the verdict against the margin of ``recipe/dapo_ascend/margins/parity_async.yaml``,
and plots each arm against sync by step and by wall-clock. A run already finished under ``--out`` is kept
(``status.json`` says so): an interrupted study continues where it stopped.

    python benchmarks/async_parity.py [--arms sync,colocate_async,...] [--seeds 1,2,3] [--steps 20]
                                      [--out benchmarks/results/async_parity] [--analyze-only] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIG = "dapo_demo_cpu"
MARGIN = REPO / "recipe" / "dapo_ascend" / "margins" / "parity_async.yaml"
COLD_WARMUP_STEPS = 18  # supervised warm-up steps of the cold base model (the demo's: 36)
COMMON = ["algorithm.filter_groups.enable=false"]
BYPASS = "algorithm.rollout_correction.bypass_mode=true"
SEPARATE = "trainer.v1.trainer_mode=separate_async"
THRESHOLD = "trainer.v1.sampler.max_off_policy_threshold"
# A prefetch window of 3 batches: the rollout runs up to 3 steps ahead, so samples reach the bound of 3
# (with upstream's window of 1 they are at most 1 version old, and any bound above 1 never binds).
DEEP = "trainer.v1.separate_async.num_warmup_batches=3"
K3_RS = ["algorithm.rollout_correction.rollout_rs=seq_mean_k3", "algorithm.rollout_correction.rollout_rs_threshold=0.01"]
# Upstream's decoupled_token_is preset: old log-probs recomputed (three policies), token-level importance weights
# pi_old / pi_rollout truncated at 2. Each old-log-prob pass sees 8 / 4 prompts x 16 = 32 responses.
TOKEN_IS = ["algorithm.rollout_correction.bypass_mode=false", "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_is_threshold=2.0",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32"]
# arm -> overrides on top of COMMON
ARMS = {
    "sync": ["trainer.v1.trainer_mode=sync", BYPASS],
    # upstream's bound of 8, named: with the window of one batch it never binds (staleness <= 1)
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async", f"{THRESHOLD}=8", BYPASS],
    "separate_async_b0": [SEPARATE, f"{THRESHOLD}=1", BYPASS],
    "separate_async_b1": [SEPARATE, f"{THRESHOLD}=2", BYPASS],
    "separate_async_b3": [SEPARATE, f"{THRESHOLD}=4", DEEP, BYPASS],
    "separate_async_b3_is": [SEPARATE, f"{THRESHOLD}=4", DEEP, *TOKEN_IS],
}
# Not among the default arms: upstream's V1 trainer skips rollout_correction in bypass mode (trainer_base.py:
# _compute_old_log_prob returns the rollout's log-probs, _compute_advantage runs the correction only when not in
# bypass mode, and nothing sets the bypass_mode policy loss), so this arm trains exactly as separate_async_b3 and
# logs no rollout_corr/* metric (measured, seed 1).
BYPASS_RS = [SEPARATE, f"{THRESHOLD}=4", DEEP, BYPASS, *K3_RS]
ARMS_MORE = {"separate_async_b3_rs": BYPASS_RS}
BASELINE_ARM = "sync"


def cold_model(tiny: Path) -> Path:
    """The study's base model: the assets' random model after ``COLD_WARMUP_STEPS`` warm-up steps (built once)."""
    from recipe.dapo_ascend.tiny import assets

    out = tiny.parent / f"{tiny.name}_cold{COLD_WARMUP_STEPS}"
    stamp = {"spec_version": assets.SPEC_VERSION, "warmup": {**assets.BASE_WARMUP, "steps": COLD_WARMUP_STEPS}}
    if (out / "stamp.json").exists() and json.loads((out / "stamp.json").read_text()) == stamp:
        return out
    import torch

    torch.set_num_threads(1)
    tokenizer = assets.build_tokenizer()
    model = assets.build_model(0)
    assets.warm_up(model, tokenizer, stamp["warmup"])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    (out / "stamp.json").write_text(json.dumps(stamp))
    return out


def finished(run: Path) -> bool:
    status = next(run.glob("*/status.json"), None)
    return status is not None and json.loads(status.read_text()).get("phase") == "finished"


def run_once(arm: str, seed: int, steps: int, out: Path, tiny: Path, model: Path) -> float | None:
    """One training run in ``out`` (kept when already finished); returns its wall time (None when kept)."""
    if finished(out):
        return None
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "VERL_ASCEND_TINY_DIR": str(tiny), "VERL_ASCEND_OUTPUT_DIR": str(out),
           "PYTHONUNBUFFERED": "1"}
    env.pop("VERL_FILE_LOGGER_PATH", None)
    args = [sys.executable, "-m", "verl_ascend", "train", "--config-name", CONFIG, f"trainer.total_training_steps={steps}",
            f"actor_rollout_ref.model.path={model}", f"data.seed={seed}", *COMMON, *{**ARMS, **ARMS_MORE}[arm]]
    started = time.monotonic()
    with open(out / "run.log", "w") as log:
        proc = subprocess.run(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    (out / "wall_s.txt").write_text(f"{wall:.1f}\n")
    if proc.returncode != 0:  # the study goes on; the analysis names the run that is missing
        print(f"FAILED: {arm} seed {seed} exited {proc.returncode}; see {out / 'run.log'}", flush=True)
    return wall


def metrics_files(out: Path, arm: str, seeds: list[int]) -> list[Path]:
    """The metrics of the arm's finished runs (a study cut short has fewer than its seeds)."""
    return [next((out / arm / str(seed)).glob("*/metrics.jsonl")) for seed in seeds if finished(out / arm / str(seed))]


def load(parity, out: Path, arm: str, seeds: list[int], spec):
    """The arm's finished runs; with fewer than parity's minimum (a study cut short), those there are."""
    files = [str(p) for p in metrics_files(out, arm, seeds)]
    return parity.load_arm(arm, files, spec, min_runs=min(parity.MIN_RUNS, max(2, len(files))))


def arm_figures(parity, base, cand, spec, out: Path, seeds: list[int]) -> dict:
    """One arm's figures against the baseline: speed, staleness, the statistics with intervals, the verdict."""
    cmp = parity.compare(base, cand, spec)
    walls = [float((out / cand.name / str(s) / "wall_s.txt").read_text()) for s in seeds
             if (out / cand.name / str(s) / "wall_s.txt").exists()]
    first = cand.matrix(cand.metric, cand.steps[:1]).mean()
    stale_max = max((d.get(parity.STALENESS.replace("/mean", "/max"), 0.0) for r in cand.runs for d in r.values.values()),
                    default=0.0)
    verdict = "baseline" if cand is base else ("PASS" if cmp.passed else "FAIL " + ", ".join(
        f.split()[-1] for f in cmp.failed))
    if cand is not base and min(len(base.runs), len(cand.runs)) < parity.MIN_RUNS:
        verdict += f" (indicative: {len(cand.runs)} runs, the protocol asks {parity.MIN_RUNS})"
    return {"arm": cand.name, "runs": len(cand.runs), "seeds": [r.seed for r in cand.runs],
            "steps_per_s": parity.steps_per_s(cand), "x_sync": parity.steps_per_s(cand) / parity.steps_per_s(base),
            "wall_s": sum(walls) / len(walls) if walls else None, "staleness": parity.mean_staleness(cand),
            "staleness_max": stale_max, "first_step": float(first), "passed": cmp.passed, "failed": cmp.failed,
            "verdict": verdict, "instability": cmp.instability,
            "diffs": {k: vars(v) for k, v in cmp.diffs.items()}}


def text_table(rows: list[dict], spec) -> list[str]:
    head = f"{'arm':22}{'runs':>5}{'steps/s':>9}{'x sync':>7}{'wall s':>8}{'stale':>6}{'max':>4}{'step 1':>7}  "
    lines = [head + "  ".join(f"{s:>30}" for s in spec.statistics) + "  verdict"]
    for r in rows:
        cells = [_cell(r["diffs"][s]) for s in spec.statistics]
        wall = f"{r['wall_s']:8.0f}" if r["wall_s"] is not None else f"{'-':>8}"
        late = f" (late instability: {'; '.join(r['instability'])})" if r["instability"] else ""
        lines.append(f"{r['arm']:22}{r['runs']:>5}{r['steps_per_s']:9.3f}{r['x_sync']:7.2f}{wall}{r['staleness']:6.2f}"
                     f"{r['staleness_max']:4.0f}{r['first_step']:7.3f}  " + "  ".join(f"{c:>30}" for c in cells)
                     + f"  {r['verdict']}{late}")
    return lines


def _cell(d: dict) -> str:
    """The arm's mean, then candidate - sync with its interval."""
    return f"{d['arm_means'][1]:.3f} ({d['delta']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])"


def markdown_table(rows: list[dict], spec) -> list[str]:
    """The same rows as the async guide's table (docs/ascend_tutorial/async_training.md)."""
    head = ["arm", "runs", "steps/s (x sync)", "wall s a run", "staleness mean (max)", "step 1",
            *(f"{s}: mean (diff [95 % CI])" for s in spec.statistics), "verdict (margin %g)" % spec.margin]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        wall = f"{r['wall_s']:.0f}" if r["wall_s"] is not None else "-"
        verdict = r["verdict"] + (f"; late instability: {'; '.join(r['instability'])}" if r["instability"] else "")
        cells = [f"`{r['arm']}`", str(r["runs"]), f"{r['steps_per_s']:.3f} ({r['x_sync']:.2f})", wall,
                 f"{r['staleness']:.2f} ({r['staleness_max']:.0f})", f"{r['first_step']:.3f}",
                 *(_cell(r["diffs"][s]) for s in spec.statistics), verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def analyze(out: Path, arms: list[str], seeds: list[int], markdown: bool = False) -> int:
    """Per arm: speed, then the parity analysis against sync; the verdict table and plots. Returns 0/2."""
    from verl_ascend.report import parity

    spec = parity.load_margin(str(MARGIN))
    missing = [a for a in arms if len(metrics_files(out, a, seeds)) < 2]
    for arm in missing:
        print(f"{arm}: {len(metrics_files(out, arm, seeds))} finished run(s) under {out / arm}: left out of the table")
    arms = [a for a in arms if a not in missing]
    if BASELINE_ARM not in arms:
        return 2  # nothing to compare against: named above
    base = load(parity, out, BASELINE_ARM, seeds, spec)
    loaded = {a: base if a == BASELINE_ARM else load(parity, out, a, seeds, spec) for a in arms}
    rows = [arm_figures(parity, base, loaded[a], spec, out, seeds) for a in arms]
    for arm in arms:
        if arm != BASELINE_ARM:
            parity.plot(base, loaded[arm], spec, out / f"parity_{arm}.png")
    parity.plot_arms(list(loaded.values()), spec, out / "async_parity.png")
    print(f"primary metric {base.metric}; margin {spec.margin:g}; statistic cells: the arm's mean (candidate - sync "
          f"[{100 * spec.confidence:g} % bootstrap interval over runs]); step 1: the arm's mean at step 1")
    print("\n".join(markdown_table(rows, spec) if markdown else text_table(rows, spec)))
    (out / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    print(f"results: {out / 'results.json'}, plots: {out / 'async_parity.png'}, {out}/parity_<arm>.png")
    return 2 if any(not r["passed"] for r in rows) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "async_parity"))
    ap.add_argument("--analyze-only", action="store_true", help="no runs: analyse those already under --out")
    ap.add_argument("--markdown", action="store_true", help="print the table as the async guide's markdown")
    args = ap.parse_args(argv)
    arms, seeds = args.arms.split(","), [int(s) for s in args.seeds.split(",")]
    unknown = [a for a in arms if a not in ARMS and a not in ARMS_MORE]
    if unknown or BASELINE_ARM not in arms:
        ap.error(f"--arms {args.arms}: unknown {unknown}; accepted: a comma-separated list of "
                 f"{list(ARMS) + list(ARMS_MORE)} "
                 f"that includes {BASELINE_ARM}")
    out = Path(args.out)
    if not args.analyze_only:
        tiny = Path(os.environ.get("VERL_ASCEND_TINY_DIR", Path.home() / ".cache" / "verl-ascend" / "tiny"))
        subprocess.run([sys.executable, "-m", "verl_ascend", "assets", "--root", str(tiny)], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL)
        model = cold_model(tiny)
        total, done, began = len(arms) * len(seeds), 0, time.monotonic()
        for seed in seeds:  # seed-major: a cut study still has every arm at its first seeds
            for arm in arms:
                done += 1
                wall = run_once(arm, seed, args.steps, out / arm / str(seed), tiny, model)
                what = "kept (finished earlier)" if wall is None else f"{wall:.0f} s"
                print(f"[{done}/{total}] {arm} seed {seed}: {what}; study {time.monotonic() - began:.0f} s",
                      flush=True)
    return analyze(out, arms, seeds, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
