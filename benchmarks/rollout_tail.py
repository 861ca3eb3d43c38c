"""Rollout long tail: the DAPO recipe with the rollout-tail policy off and on, side by side.

Runs the real entry point twice in one invocation on the long-tail workload
(``--config-name dapo_tail_cpu``: a 12-layer, 1.2M-parameter tiny Qwen2; one prompt in eight is
hard and answered, unsuccessfully, with hundreds of tokens, mostly the 448-token limit; the others
with one digit and EOS), ``--steps`` steps each, same seed, and reads upstream's per-step metrics:

- rollout wall time per useful sample: ``timing_s/gen`` / samples trained that step (the groups
  that survived dynamic sampling x rollout.n). ``speedup`` = off / on, over all steps but the
  first (the first carries one-off start-up work in both runs);
- tail fraction: ``rollout_tail/tail_s`` / ``rollout_tail/sample_s`` summed over the steps, the
  share of sampling time spent after enough useful groups were complete (measured identically
  with the policy off: upstream's sampling is only observed there);
- aborted requests, carried tokens and staleness of the policy-on run;
- the reward curves (``critic/score/mean``): last-10-step means of both runs.

Writes ``rollout_tail.png`` (rollout time, tail fraction and reward per step, both runs) and
``rollout_tail.json`` into the output directory. The last line is::

    rollout_tail speedup=<x.xx> tail_off=<fraction> tail_on=<fraction>

The policy-on run uses the documented setup: ``rollout_tail.enable=true`` plus
``algorithm.rollout_correction.rollout_is=token`` (on-policy tokens get weight 1, so this only
touches carried-over tokens).

Usage: ``python benchmarks/rollout_tail.py [--steps 20] [--engine hf|vllm ...] [--out DIR] [overrides...]``;
the overrides (upstream-style Hydra) apply to both runs, ``--on`` adds overrides to the policy-on run
only (e.g. ``--on trainer.v1.dapo_ascend.rollout_tail.over_provision=2``). ``--engine`` names the
rollout engine(s) (``actor_rollout_ref.rollout.name``; ``vllm`` needs ``make vllm``); with several,
each gets its off/on pair, in its own sub-directory, and its own closing line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = "dapo_tail_cpu"
POLICY = "trainer.v1.dapo_ascend.rollout_tail.enable"
# The policy as documented: carried-over tokens enter the loss with truncated importance weights.
CORRECTION = "algorithm.rollout_correction.rollout_is=token"
# Runs whose mean response lengths differ by more than this factor are flagged as confounded.
LENGTH_TOLERANCE = 1.25


def run(name: str, overrides: list[str], steps: int, out: Path, env: dict) -> list[dict]:
    """One training run; returns its per-step metrics. Progress lines are echoed as they come."""
    run_out = out / name
    env = {**env, "VERL_ASCEND_OUTPUT_DIR": str(run_out)}
    cmd = [
        sys.executable, "-m", "verl_ascend", "train", "--config-name", CONFIG,
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "fault_tolerance.allow_no_checkpoints=true", *overrides,
    ]
    print(f"== {name}: {' '.join(cmd[3:])}", flush=True)
    started = time.perf_counter()
    log = (out / f"{name}.log").open("w")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        log.write(line)
        if line.startswith("[verl-ascend] step"):
            print(f"   {name}: {line.strip()[len('[verl-ascend] '):]}", flush=True)
    log.close()
    if proc.wait() != 0:
        tail = (out / f"{name}.log").read_text()[-4000:]
        raise SystemExit(f"{name} run failed (exit {proc.returncode}); end of {out / f'{name}.log'}:\n{tail}")
    print(f"   {name}: {time.perf_counter() - started:.0f}s wall incl. start-up", flush=True)
    metrics = run_out / CONFIG / "metrics.jsonl"
    rows = [json.loads(x).get("data", {}) for x in metrics.read_text().splitlines() if x.strip()]
    return [r for r in rows if "timing_s/gen" in r]


def useful_samples(d: dict) -> float:
    """Samples trained this step: tokens trained / mean tokens per sample."""
    per_sample = d["prompt_length/mean"] + d["response_length/mean"]
    return d["perf/total_num_tokens"] / per_sample


def summary(rows: list[dict]) -> dict:
    steady = rows[1:] or rows
    gen = sum(d["timing_s/gen"] for d in steady)
    useful = sum(useful_samples(d) for d in steady)
    scores = [d["critic/score/mean"] for d in rows]
    get = lambda key: [d.get(key, 0.0) for d in steady]  # noqa: E731
    return {
        "steps": len(rows),
        "gen_s_mean": gen / len(steady),
        "gen_s_per_useful_sample": gen / useful,
        # time-weighted: a step served entirely from carried-over groups has a ~0 s sample
        "tail_fraction": sum(get("rollout_tail/tail_s")) / max(sum(get("rollout_tail/sample_s")), 1e-9),
        "aborted_requests_per_step": statistics.fmean(get("rollout_tail/aborted_requests")),
        "submitted_groups_per_step": statistics.fmean(get("rollout_tail/submitted_groups")),
        "carried_tokens_per_step": statistics.fmean(get("rollout_tail/carried_tokens")),
        "off_policy_token_fraction": statistics.fmean(get("rollout_tail/off_policy_token_fraction")),
        "staleness_max": max(get("rollout_tail/staleness/max")),
        "response_length_mean": statistics.fmean(get("response_length/mean")),
        "score_last10": statistics.fmean(scores[-10:]),
        "acc_last10": statistics.fmean([d.get("reward_extra/acc/mean", 0.0) for d in rows][-10:]),
        "gen_s": [d["timing_s/gen"] for d in rows],
        "tail": [d.get("rollout_tail/tail_fraction", 0.0) for d in rows],
        "score": scores,
    }


def plot(off: dict, on: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for ax, key, title in zip(axes, ("gen_s", "tail", "score"), ("rollout time (s)", "tail fraction", "reward (score mean)")):
        for name, s in (("policy off", off), ("policy on", on)):
            ax.plot(range(1, len(s[key]) + 1), s[key], marker=".", label=name)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"rollout tail: speedup {off['gen_s_per_useful_sample'] / on['gen_s_per_useful_sample']:.2f}x per useful sample")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: a temp dir)")
    parser.add_argument("--on", action="append", default=[], help="override for the policy-on run only")
    parser.add_argument("--engine", nargs="+", choices=["hf", "vllm"], default=["hf"],
                        help="rollout engine(s): actor_rollout_ref.rollout.name (default hf)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both runs")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is reported apart)")

    out = (args.out or Path(tempfile.mkdtemp(prefix="verl-ascend-tail-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VERL_FILE_LOGGER_PATH", None)
    tail_dir = env.setdefault("VERL_ASCEND_TAIL_DIR", str(Path.home() / ".cache" / "verl-ascend" / "tiny_tail"))
    built = subprocess.run(
        [sys.executable, "-m", "verl_ascend", "assets", "--workload", "tail", "--root", tail_dir],
        cwd=REPO, env=env, capture_output=True, text=True,
    )
    if built.returncode != 0:
        raise SystemExit(f"building the tail workload's assets failed:\n{built.stderr[-3000:]}")

    for engine in args.engine:
        compare(engine, args, out / engine if len(args.engine) > 1 else out, env)
    return 0


def compare(engine: str, args, out: Path, env: dict) -> None:
    """Policy off, then on, with rollout engine ``engine``; prints the table and the closing line."""
    out.mkdir(parents=True, exist_ok=True)
    both = [f"actor_rollout_ref.rollout.name={engine}", *args.overrides]
    off = summary(run("off", [f"{POLICY}=false", *both], args.steps, out, env))
    on_overrides = [f"{POLICY}=true", CORRECTION, *both, *args.on]
    on = summary(run("on", on_overrides, args.steps, out, env))
    speedup = off["gen_s_per_useful_sample"] / on["gen_s_per_useful_sample"]

    print()
    print(f"{'(' + engine + ', steps 2..N, means per step)':36}{'policy off':>12}{'policy on':>12}{'off/on':>9}")
    for key, label, fmt in (
        ("gen_s_mean", "rollout time (s)", "{:12.2f}"),
        ("gen_s_per_useful_sample", "rollout s per useful sample", "{:12.4f}"),
        ("tail_fraction", "tail fraction", "{:12.3f}"),
        ("submitted_groups_per_step", "prompt groups submitted", "{:12.1f}"),
        ("aborted_requests_per_step", "requests aborted", "{:12.1f}"),
        ("carried_tokens_per_step", "carried-over tokens trained", "{:12.1f}"),
        ("off_policy_token_fraction", "off-policy token fraction", "{:12.3f}"),
        ("staleness_max", "staleness max (steps)", "{:12.0f}"),
        ("response_length_mean", "response length", "{:12.1f}"),
    ):
        ratio = off[key] / on[key] if on[key] else float("nan")
        print(f"{label:36}{fmt.format(off[key])}{fmt.format(on[key])}{ratio:9.2f}")
    print(f"{'reward, last-10-step mean':36}{off['score_last10']:12.3f}{on['score_last10']:12.3f}")
    print(f"{'accuracy, last-10-step mean':36}{off['acc_last10']:12.3f}{on['acc_last10']:12.3f}")
    length_ratio = off["response_length_mean"] / max(on["response_length_mean"], 1e-9)
    comparable = 1 / LENGTH_TOLERANCE <= length_ratio <= LENGTH_TOLERANCE
    if not comparable:
        # The runs trained responses of different lengths (training moved the distributions
        # apart, or the policy trains a different mix): rollout time per sample then measures the
        # lengths as well as the policy. Rerun (or compare more steps) before quoting the speedup.
        print(f"warning: mean trained response lengths differ {length_ratio:.2f}x between the runs "
              f"(more than {LENGTH_TOLERANCE}x either way): the speedup also measures that difference")
    plot(off, on, out / "rollout_tail.png")
    (out / "rollout_tail.json").write_text(
        json.dumps({"off": off, "on": on, "speedup": speedup, "lengths_comparable": comparable}, indent=1)
    )
    print(f"plot: {out / 'rollout_tail.png'}; numbers: {out / 'rollout_tail.json'}")
    print(f"rollout_tail engine={engine} speedup={speedup:.2f} tail_off={off['tail_fraction']:.3f} "
          f"tail_on={on['tail_fraction']:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
