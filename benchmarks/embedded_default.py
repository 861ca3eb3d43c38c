"""Throughput of the embedded default (DAPO on the tiny Qwen2, CPU): rollout and training, side by side.

Runs the recipe for ``--steps`` steps in a fresh output directory (the real entry point, as
``make demo`` runs it) and reads upstream's per-step metrics:

- steps/s            1 / timing_s/step
- rollout tokens/s   response tokens generated / timing_s/gen (all generation rounds of a step,
                     dynamic-sampling refills included, divided by the wall time of generation)
- training tokens/s  prompt+response tokens trained / (timing_s/old_log_prob + timing_s/update_actor)

The first step is reported separately (it carries one-off start-up work) and excluded from
the steady-state means. Usage: ``python benchmarks/embedded_default.py --steps 10 [overrides...]``,
or ``--metrics FILE`` to read the metrics of a run that already happened (e.g. ``make demo``'s).
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: a temp dir)")
    parser.add_argument("--metrics", type=Path, default=None, help="summarise this metrics.jsonl instead of running")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args(argv)
    if args.metrics is not None:
        return summarise(args.metrics, wall=None)

    out = args.out or Path(tempfile.mkdtemp(prefix="verl-ascend-bench-"))
    env = {**os.environ, "VERL_ASCEND_OUTPUT_DIR": str(out), "PYTHONUNBUFFERED": "1"}
    env.pop("VERL_FILE_LOGGER_PATH", None)
    tiny = env.setdefault("VERL_ASCEND_TINY_DIR", str(Path.home() / ".cache" / "verl-ascend" / "tiny"))
    subprocess.run([sys.executable, "-m", "recipe.dapo_ascend.tiny.assets", "--root", tiny], check=True, cwd=REPO, env=env)
    cmd = [
        sys.executable, "-m", "recipe.dapo_ascend.main_dapo", "--config-name", "dapo_tiny_cpu",
        f"trainer.total_training_steps={args.steps}", f"trainer.save_freq={args.steps}", *args.overrides,
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        print(proc.stdout[-5000:])
        return proc.returncode
    for line in proc.stdout.splitlines():
        if line.startswith("[verl-ascend] step"):
            print(line)
    return summarise(out / "dapo_tiny_cpu" / "metrics.jsonl", wall=wall, out=out)


def summarise(metrics: Path, wall: float | None, out: Path | None = None) -> int:
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    steps = [r["data"] for r in records if "timing_s/step" in r["data"]]

    def row(d):
        per_response = d["prompt_length/mean"] + d["response_length/mean"]
        responses = d["perf/total_num_tokens"] / per_response  # responses in the trained batch
        train_s = d.get("timing_s/old_log_prob", 0.0) + d.get("timing_s/update_actor", 0.0)
        return {
            "step_s": d["timing_s/step"],
            "gen_s": d["timing_s/gen"],
            "train_s": train_s,
            # useful tokens: responses that survived dynamic sampling, per second of generation
            "rollout_tok_s": responses * d["response_length/mean"] / d["timing_s/gen"],
            "train_tok_s": d["perf/total_num_tokens"] / train_s if train_s else float("nan"),
        }

    rows = [row(d) for d in steps]
    steady = rows[1:] or rows
    mean = lambda key: statistics.fmean(r[key] for r in steady)  # noqa: E731
    print()
    print(f"{'':24}{'first step':>12}{'steady mean':>14}")
    for key, label in (("step_s", "step time (s)"), ("gen_s", "rollout time (s)"), ("train_s", "train time (s)"),
                       ("rollout_tok_s", "rollout tokens/s"), ("train_tok_s", "training tokens/s")):
        print(f"{label:24}{rows[0][key]:12.2f}{mean(key):14.2f}")
    print(f"{'steps/s':24}{1 / rows[0]['step_s']:12.3f}{1 / mean('step_s'):14.3f}")
    print(f"rollout share of step time: {mean('gen_s') / mean('step_s'):.1%}; train:rollout = 1:{mean('gen_s') / mean('train_s'):.1f}")
    if wall is not None:
        print(f"wall time incl. start-up: {wall:.0f}s for {len(rows)} steps; output: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
