"""The CPU rollout engines side by side: the same tiny DAPO run with ``hf`` and with ``vllm``.

One invocation runs the recipe (``dapo_tiny_cpu``, the real entry point) once per engine, one
after the other in fresh output directories, and reads upstream's per-step metrics:

- rollout tokens/s   response tokens of the trained batch / timing_s/gen (steady steps)
- step time          timing_s/step (steady steps: all but the first, which carries one-off work)
- start-up           wall time from launch until the first step began (Ray, workers, the engine)

The last line is the ratio vllm/hf of each. Usage:
``python benchmarks/rollout_engines.py [--steps 6] [--engines hf vllm] [overrides...]``
(``vllm`` needs ``make vllm``). Speed is measured here, never asserted in tests.
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
STEP_LINE = "[verl-ascend] step 1/"


def run_engine(engine: str, steps: int, overrides: list[str], out: Path) -> dict:
    """Train ``steps`` steps with ``rollout.name=engine``; its figures, or an ``error``."""
    env = {**os.environ, "VERL_ASCEND_OUTPUT_DIR": str(out), "PYTHONUNBUFFERED": "1"}
    env.pop("VERL_FILE_LOGGER_PATH", None)
    cmd = [
        sys.executable, "-m", "verl_ascend", "train", "--config-name", "dapo_tiny_cpu",
        f"actor_rollout_ref.rollout.name={engine}", f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={steps}", *overrides,
    ]
    started = time.perf_counter()
    first_step_done, tail = None, []
    with subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            tail = (tail + [line])[-60:]
            if first_step_done is None and line.startswith(STEP_LINE):
                first_step_done = time.perf_counter() - started
    if proc.returncode != 0 or first_step_done is None:
        return {"error": f"exit {proc.returncode}; last output:\n{''.join(tail)}"}
    records = [json.loads(x) for x in (out / "dapo_tiny_cpu" / "metrics.jsonl").read_text().splitlines()]
    data = [r["data"] for r in records if "timing_s/step" in r["data"]]
    steady = data[1:] or data

    def tokens(d):  # response tokens of the batch that was trained
        responses = d["perf/total_num_tokens"] / (d["prompt_length/mean"] + d["response_length/mean"])
        return responses * d["response_length/mean"]

    return {
        "rollout_tok_s": sum(tokens(d) for d in steady) / sum(d["timing_s/gen"] for d in steady),
        "step_s": statistics.fmean(d["timing_s/step"] for d in steady),
        "startup_s": first_step_done - data[0]["timing_s/step"],
        "acc_last": data[-1]["reward_extra/acc/mean"],
        "probs_diff_max": max(d.get("training/rollout_probs_diff_max", float("nan")) for d in data),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--engines", nargs=2, default=["hf", "vllm"], metavar=("BASE", "OTHER"))
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is start-up, the rest steady state)")
    root = args.out or Path(tempfile.mkdtemp(prefix="verl-ascend-engines-"))
    tiny = os.environ.setdefault("VERL_ASCEND_TINY_DIR", str(Path.home() / ".cache" / "verl-ascend" / "tiny"))
    subprocess.run([sys.executable, "-m", "verl_ascend", "assets", "--root", tiny], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    results = {engine: run_engine(engine, args.steps, args.overrides, root / engine) for engine in args.engines}
    failed = {engine: r["error"] for engine, r in results.items() if "error" in r}
    for engine, error in failed.items():
        print(f"{engine}: {error}", file=sys.stderr)
    if failed:
        return 1
    base, other = args.engines
    rows = (("rollout tokens/s", "rollout_tok_s", "{:.1f}"), ("step time (s)", "step_s", "{:.2f}"),
            ("start-up (s)", "startup_s", "{:.1f}"), ("acc, last step", "acc_last", "{:.3f}"),
            ("rollout_probs_diff_max", "probs_diff_max", "{:.1e}"))
    print(f"{args.steps} steps each (steady figures over steps 2..{args.steps}); outputs under {root}")
    print(f"{'':26}{base:>12}{other:>12}")
    for label, key, fmt in rows:
        print(f"{label:26}{fmt.format(results[base][key]):>12}{fmt.format(results[other][key]):>12}")
    ratio = {key: results[other][key] / results[base][key] for _, key, _ in rows[:3]}
    print(f"{other}/{base}: rollout tokens/s {ratio['rollout_tok_s']:.2f}x, step time {ratio['step_s']:.2f}x, "
          f"start-up {ratio['startup_s']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
