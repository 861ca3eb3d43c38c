"""The memory plan's cost and its error: planning time and the planner's own peak RSS, plan vs measured.

``python benchmarks/memory_plan.py [--tiny-dir DIR] [--no-measure] [--no-32b]``

One table, one row each:
- ``plan``: a composed config planned in a fresh process (``--plan NAME``), so its wall and CPU time
  (``resource.getrusage``: user + system of that process) and peak RSS (``ru_maxrss``) are the
  planner's own: imports, composition, architecture, every phase's fake-tensor trace.
- ``measured``: a training case of ``verl_ascend/memory/train_cases.py`` (the tiny recipe over 2 gloo
  ranks): the planned peak of its phase against the measured peak of live tensor memory of the same
  program on real tensors (and the CPU allocator's own figure, which also holds gloo's staging).
Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipe" / "dapo_ascend" / "config"
MIB = 1024**2
GIB = 1024**3


def plan_once(name: str, overrides: list[str]) -> dict:
    """In this process: compose ``name``, plan its training phases; time, CPU, RSS and the phases."""
    start = time.perf_counter()
    from verl_ascend.memory.training import plan_training
    from verl_ascend.run.config_utils import compose

    phases = plan_training(compose(name, overrides, CONFIG_DIR))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "phases": [{"name": p.name, "role": p.role, "peak": p.peak,
                    "terms": [[kind, t.name, t.bytes] for kind, terms in
                              (("resident", p.resident), ("active", p.active), ("host", p.host)) for t in terms]}
                   for p in phases],
    }


def plan_in_child(name: str, overrides: list[str]) -> dict:
    command = [sys.executable, __file__, "--plan", name, *overrides]
    # cold: the trace cache off, so the figures are a first plan's (a cached one reads a file)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VERL_ASCEND_MEMORY_CACHE": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"planning {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measured_rows(tiny_dir: Path) -> list[dict]:
    from verl_ascend.memory.train_cases import CASES, case_overrides
    from verl_ascend.memory.train_measure import measure_all
    from verl_ascend.memory.train_trace import trace
    from verl_ascend.memory.training import phase_shapes
    from verl_ascend.run.config_utils import compose

    config = compose("dapo_tiny_cpu", [f"tiny_dir={tiny_dir}"], CONFIG_DIR)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        shapes = [phase_shapes(config, overrides=case_overrides(case, tiny_dir / "model", Path(scratch)))[case.phase]
                  for case in CASES]
        print(f"  measuring {len(shapes)} cases on 2 gloo ranks", file=sys.stderr, flush=True)
        for case, shape, measured in zip(CASES, shapes, measure_all(shapes)):
            start = time.perf_counter()
            planned = trace(shape).peak
            plan_s = time.perf_counter() - start
            rows.append({"kind": "measured", "config": case.name, "phase": case.phase, "tokens": shape.tokens,
                         "planned": planned, "live": measured.live, "allocator": measured.allocator,
                         "error": (planned - measured.live) / measured.live, "plan_s": plan_s})
            print(f"  measured {case.name}: planned {planned} live {measured.live} "
                  f"allocator {measured.allocator}", file=sys.stderr, flush=True)
    return rows


def print_table(plans: dict[str, dict], measured: list[dict]) -> None:
    print(f"{'kind':<9} {'config':<44} {'phase':<13} {'planned':>12} {'measured':>12} {'allocator':>12} "
          f"{'error':>7} {'plan s':>7} {'cpu s':>7} {'RSS MiB':>8}")
    for name, plan in plans.items():
        for phase in plan["phases"]:
            print(f"{'plan':<9} {name:<44} {phase['name']:<13} {phase['peak'] / GIB:>10.3f}Gi {'':>12} {'':>12} "
                  f"{'':>7} {plan['wall_s']:>7.1f} {plan['cpu_s']:>7.1f} {plan['rss_mib']:>8.0f}")
    for row in measured:
        print(f"{'measured':<9} {row['config']:<44} {row['phase']:<13} {row['planned'] / MIB:>10.3f}Mi "
              f"{row['live'] / MIB:>10.3f}Mi {row['allocator'] / MIB:>10.3f}Mi {100 * row['error']:>6.2f}% "
              f"{row['plan_s']:>7.1f} {'':>7} {'':>8}")


def print_terms(plans: dict[str, dict]) -> None:
    for name, plan in plans.items():
        for phase in plan["phases"]:
            print(f"\n{name} / {phase['name']} ({phase['role']}): peak {phase['peak'] / GIB:.2f} GiB")
            for kind, term, nbytes in phase["terms"]:
                print(f"  {kind:<9} {term:<40} {nbytes / GIB:>9.3f} GiB")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", help="(internal) plan this config in this process and print JSON")
    parser.add_argument("--tiny-dir", type=Path, default=Path(os.environ.get(
        "VERL_ASCEND_TINY_DIR", Path.home() / ".cache" / "verl-ascend" / "tiny")))
    parser.add_argument("--no-measure", action="store_true", help="skip the measured cases")
    parser.add_argument("--no-32b", action="store_true", help="skip planning the 32B job")
    args, rest = parser.parse_known_args(argv)
    if args.plan:
        print(json.dumps(plan_once(args.plan, rest)))
        return 0
    from recipe.dapo_ascend.tiny.assets import build

    tiny_dir = Path(build(args.tiny_dir))
    targets = {"dapo_tiny_cpu (1 card)": ("dapo_tiny_cpu", [f"tiny_dir={tiny_dir}"]),
               "dapo_tiny_cpu, 2 cards, packed, KL": ("dapo_tiny_cpu", [
                   f"tiny_dir={tiny_dir}", "trainer.n_gpus_per_node=2", "actor_rollout_ref.model.use_remove_padding=true",
                   "actor_rollout_ref.actor.use_kl_loss=true"])}
    if not args.no_32b:
        targets["dapo_qwen25_32b_npu (128 cards)"] = ("dapo_qwen25_32b_npu", [])
    plans = {label: plan_in_child(name, overrides) for label, (name, overrides) in targets.items()}
    measured = [] if args.no_measure else measured_rows(tiny_dir)
    print_table(plans, measured)
    print_terms(plans)
    return 0


if __name__ == "__main__":
    sys.exit(main())
