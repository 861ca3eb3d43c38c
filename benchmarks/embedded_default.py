"""Where one step of the embedded default goes, and the recipe against upstream's main_ppo.

One invocation runs the same workload twice, each in a fresh output directory:

- ``recipe``    ``verl-ascend train --config-name dapo_demo_cpu`` (the recipe's trainer)
- ``main_ppo``  ``python -m verl.trainer.main_ppo`` on the very same composed config
                (``--config-path recipe/dapo_ascend/config``), with upstream's own synchronous
                trainer (``trainer.v1.trainer_mode=sync``): same model, data, reward, sizes.

Workloads (``--workload``), both on the demo's config, model, data and reward:

- ``reference`` (default): 4 prompts x 4 samples x up to 16 tokens a step, the workload the
  issue that asked for this benchmark measured upstream's trainer on (2.9x then);
- ``demo``: the demo's own sizes, 8 prompts x 16 samples x up to 8 tokens.

Dynamic sampling and the overlong penalty are off (so both runs generate exactly one round per
step); ``--dapo`` keeps them on. Each step is broken into its parts from upstream's timers
(``timing_s/*``), the recipe's agent-loop timings (each rollout's generation and scoring, from
the agent loop's own per-sample metrics) and the wall clock of the run (start-up: launch until
the first step begins, measured by watching the metrics file). The sampling phase minus the
slowest rollout (generation + scoring) is dispatch, queueing in the agent loop, TransferQueue
writes, dynamic-sampling refills and the replay buffer waiting for its next poll (upstream polls
every 2 s, so its sampling phase is never shorter; the recipe every
``trainer.v1.dapo_ascend.poll_interval_s``). Step 1 carries one-off work outside upstream's
timers ("other": the agent-loop workers start then).

The last line is the steady-state steps/s ratio, recipe over main_ppo (steps 2..N, checkpoint
time excluded). Usage::

    python benchmarks/embedded_default.py [--workload reference|demo] [--steps 8] [--dapo] [--only recipe|main_ppo] [overrides...]
    python benchmarks/embedded_default.py --metrics outputs/dapo_tiny_cpu/metrics.jsonl   # an existing run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = "dapo_demo_cpu"
WORKLOADS = {
    "reference": [
        "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4", "data.max_response_length=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
    ],
    "demo": [],
}
SAME_ROUNDS = ["algorithm.filter_groups.enable=false", "reward.reward_kwargs.overlong_buffer_cfg.enable=false"]
RUNS = {
    "recipe": ["-m", "verl_ascend", "train", "--config-name", CONFIG],
    "main_ppo": [
        "-m", "verl.trainer.main_ppo", "--config-path", str(REPO / "recipe/dapo_ascend/config"),
        "--config-name", CONFIG, "trainer.v1.trainer_mode=sync",
    ],
}
# (label, how to get it from one step's metrics); None when the run did not log it.
PARTS = (
    ("sampling phase (gen)", lambda d: d.get("timing_s/gen")),
    ("  agent loop: slowest generation", lambda d: d.get("agent_loop/generate_sequences/max")),
    ("  agent loop: slowest reward", lambda d: d.get("agent_loop/compute_score/max")),
    ("  dispatch, queueing, buffer polls", lambda d: _buffer_wait(d)),
    ("reward (colocated)", lambda d: d.get("timing_s/reward")),
    ("log-prob recomputation", lambda d: d.get("timing_s/old_log_prob")),
    ("advantages", lambda d: d.get("timing_s/adv")),
    ("actor update", lambda d: d.get("timing_s/update_actor")),
    ("weight sync", lambda d: d.get("timing_s/update_weights")),
    ("checkpoint", lambda d: d.get("timing_s/save_checkpoint")),
    ("other (transfer queue, metrics)", lambda d: _other(d)),
    ("step", lambda d: d["timing_s/step"]),
)
TIMED = ("gen", "reward", "old_log_prob", "adv", "update_actor", "update_weights", "save_checkpoint")


def _buffer_wait(d: dict):
    if "agent_loop/generate_sequences/max" not in d:
        return None
    rollout = d["agent_loop/generate_sequences/max"] + d.get("agent_loop/compute_score/max", 0.0)
    return max(d["timing_s/gen"] - rollout, 0.0)


def _other(d: dict) -> float:
    return d["timing_s/step"] - sum(d.get(f"timing_s/{k}", 0.0) for k in TIMED)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="reference")
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: a temp dir)")
    parser.add_argument("--dapo", action="store_true", help="keep dynamic sampling and the overlong penalty on")
    parser.add_argument("--only", choices=sorted(RUNS), help="run one side only (no ratio)")
    parser.add_argument("--metrics", type=Path, default=None, help="break down this metrics.jsonl instead of running")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, applied to both runs")
    args = parser.parse_args(argv)
    if args.metrics is not None:
        print_breakdown({"run": (steps_of(args.metrics), None)})
        return 0
    if args.steps < 3:
        parser.error("--steps must be at least 3 (step 1 is start-up work, the last one saves a checkpoint)")

    out = args.out or Path(tempfile.mkdtemp(prefix="verl-ascend-bench-"))
    tiny = os.environ.get("VERL_ASCEND_TINY_DIR", str(Path.home() / ".cache" / "verl-ascend" / "tiny"))
    subprocess.run([sys.executable, "-m", "verl_ascend", "assets", "--root", tiny], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    overrides = [f"trainer.total_training_steps={args.steps}", *WORKLOADS[args.workload],
                 *([] if args.dapo else SAME_ROUNDS), *args.overrides]
    print(f"[bench] workload {args.workload}{' (dynamic sampling and overlong penalty on)' if args.dapo else ''}", flush=True)
    results = {}
    for name in [args.only] if args.only else RUNS:
        results[name] = run_once(name, out / name, tiny, overrides)
        if results[name] is None:
            return 1
    print_breakdown(results)
    if len(results) == 2:
        rate = {name: 1.0 / steady_step_s(steps) for name, (steps, _) in results.items()}
        print(f"steps/s ratio (recipe / main_ppo): {rate['recipe'] / rate['main_ppo']:.2f}")
    return 0


def run_once(name: str, out: Path, tiny: str, overrides: list[str]):
    """Run one side; returns (per-step metrics, wall clock dict) or None after printing its log tail."""
    metrics = out / "metrics.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "VERL_ASCEND_OUTPUT_DIR": str(out), "VERL_ASCEND_TINY_DIR": tiny,
           "VERL_FILE_LOGGER_PATH": str(metrics), "PYTHONUNBUFFERED": "1"}
    print(f"[bench] {name}: {args_line(RUNS[name] + overrides)}", flush=True)
    seen: list[float] = []  # wall time at which each metrics line appeared
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *RUNS[name], *overrides], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = threading.Thread(target=_watch, args=(metrics, proc, started, seen), daemon=True)
    watcher.start()
    log = proc.stdout.read()
    proc.wait()
    wall = time.perf_counter() - started
    watcher.join()
    if proc.returncode != 0:
        print(log[-5000:])
        print(f"[bench] {name} failed with exit status {proc.returncode}")
        return None
    steps = steps_of(metrics)
    clock = {"wall": wall, "startup": seen[0] - steps[0]["timing_s/step"] if seen else None,
             "shutdown": wall - seen[-1] if seen else None}
    return steps, clock


def _watch(metrics: Path, proc, started: float, seen: list[float]) -> None:
    while True:
        lines = metrics.read_text().count("\n") if metrics.exists() else 0
        while len(seen) < lines:
            seen.append(time.perf_counter() - started)
        if proc.poll() is not None:
            return
        time.sleep(0.05)


def args_line(args: list[str]) -> str:
    return " ".join(args[1:] if args[0] == "-m" else args)


def steps_of(metrics: Path) -> list[dict]:
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r["data"] for r in records if "timing_s/step" in r["data"]]


def steady_step_s(steps: list[dict]) -> float:
    """Mean step time over steps 2..N without checkpoint saving (one-off work)."""
    return statistics.fmean(d["timing_s/step"] - d.get("timing_s/save_checkpoint", 0.0) for d in steps[1:])


def print_breakdown(results: dict) -> None:
    """One column pair (first step, steady mean) per run; '-' where a run did not log a part."""
    names = list(results)
    print()
    print(f"{'seconds':34}" + "".join(f"{n + ' step 1':>18}{n + ' steady':>18}" for n in names))
    for label, get in PARTS:
        cells = []
        for name in names:
            steps = results[name][0]
            first, rest = get(steps[0]), [get(d) for d in steps[1:]]
            rest = [v for v in rest if v is not None]
            cells += [_fmt(first), _fmt(statistics.fmean(rest) if rest else None)]
        print(f"{label:34}" + "".join(f"{c:>18}" for c in cells))
    for name in names:
        steps, clock = results[name]
        line = f"[{name}] steady {steady_step_s(steps):.3f} s/step = {1 / steady_step_s(steps):.3f} steps/s"
        if clock:
            line += (f"; start-up {clock['startup']:.1f} s (launch to first step), shut-down "
                     f"{clock['shutdown']:.1f} s, wall {clock['wall']:.1f} s for {len(steps)} steps")
        print(line)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
