"""The same DAPO workload through each of upstream's trainer modes, side by side, in one invocation.

Each run is ``verl-ascend train --config-name <workload's config>
trainer.v1.trainer_mode=<mode>`` in a fresh output directory (the recipe's trainer in upstream's class
for the mode; the CPU platform fills in separate_async's rollout pool and gloo weight-sync engine).
Workloads (``--workloads``):

- ``demo``: the demo as shipped (DAPO: dynamic sampling, overlong shaping; 8 prompts x 16 samples);
  its synchronous step is mostly rollout;
- ``balanced``: synchronous rollout and training take comparable time, the case where overlapping
  them pays most. The tail benchmark's 12-layer model on the ``steady`` assets (tiny/assets.py
  ``STEADY``: every answer runs to the 256-token limit), 4 prompts x 8 samples, two PPO epochs,
  no dynamic sampling, the rollout's log-probs as the old policy's (``bypass_mode``). A step's cost
  is the model's decoding and training, as on an accelerator, not per-sample bookkeeping;
- ``many_short``: the demo with dynamic sampling off and ``ppo_epochs=3``: also balanced, but with
  128 two-token responses a step, so per-sample bookkeeping (agent loop, TransferQueue, Ray) is
  most of the rollout's CPU and competes with training for the same 2 cores.

Per run, from the metrics file (steps 2..N; step 1 carries the start-up): steps/s, and per step the
rollout time (``timing_s/gen``: the sampling phase; in the async modes it is the trainer's *wait* for
samples, the rollout itself runs beside training), the training time (the step minus that),
weight-sync time (``timing_s/update_weights``), staleness (upstream's
``training/off_policy/trajectory_staleness/mean``), trained-batch accuracy over the last 10 steps and
the time until the trained batch's accuracy (3-step mean) first reaches ``--target-acc``; from the run
journal's prompt ledger, the prompts drawn per step (the rollout's work: with dynamic sampling it follows
each run's accuracy); from ``/proc/stat`` while the run goes, how many of the machine's cores were busy.

The overlap bound is measured on the sync run: with rollout R and training T per step, running them
side by side at best takes max(R, T) a step, so the bound is ``1 / max(R, T)`` steps/s, ``(R + T) /
max(R, T)`` times sync. The last lines print each async mode's steps/s over sync and its share of
that bound, then the same share for the rollout work the mode actually did (``work_matched``), and the
steps/s of each run. A plot of accuracy and step time per mode (every run) goes next to the JSON results.

    python benchmarks/trainer_modes.py [--workloads demo,balanced] [--modes sync,colocate_async,separate_async]
                                       [--steps 11] [--repeats 1] [--out benchmarks/results/trainer_modes]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from verl_ascend.run.files import PROMPTS_FILE, read_jsonl  # noqa: E402

MODES = ("sync", "colocate_async", "separate_async")
# workload -> (config, tiny assets workload, overrides)
WORKLOADS = {
    "demo": ("dapo_demo_cpu", "first_digit", []),
    "balanced": ("dapo_tail_cpu", "steady", [
        "algorithm.filter_groups.enable=false",
        "data.max_response_length=256",
        "actor_rollout_ref.actor.ppo_epochs=2",
        "algorithm.rollout_correction.bypass_mode=true",
        "trainer.v1.dapo_ascend.reward_in_agent_loop=true",
        "trainer.v1.dapo_ascend.poll_interval_s=0.02",
    ]),
    "many_short": ("dapo_demo_cpu", "first_digit",
                   ["algorithm.filter_groups.enable=false", "actor_rollout_ref.actor.ppo_epochs=3"]),
}


def assets(kind: str, tiny: str) -> str:
    """Build (or reuse) one kind of tiny assets (tiny/assets.py ``--workload``); returns their root."""
    root = tiny if kind == "first_digit" else str(Path(tiny).parent / f"tiny_{kind}")
    subprocess.run([sys.executable, "-m", "verl_ascend", "assets", "--root", root, "--workload", kind],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return root


def run_once(mode: str, workload: str, steps: int, out: Path, roots: dict, extra: list[str]) -> dict:
    """One training run; returns its per-step records (``step``, ``data``) and wall time.

    ``out`` is this run's own folder under ``--out``: a previous invocation's run there is removed first
    (the recipe refuses to start over a run's history unless told to, and a benchmark always starts fresh).
    """
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # dapo_tail_cpu reads its assets from $VERL_ASCEND_TAIL_DIR, the demo configs from $VERL_ASCEND_TINY_DIR.
    env = {**os.environ, "VERL_ASCEND_TINY_DIR": roots["first_digit"],
           "VERL_ASCEND_TAIL_DIR": roots[WORKLOADS[workload][1]], "VERL_ASCEND_OUTPUT_DIR": str(out),
           "PYTHONUNBUFFERED": "1"}
    env.pop("VERL_FILE_LOGGER_PATH", None)
    config, _, overrides = WORKLOADS[workload]
    args = [sys.executable, "-m", "verl_ascend", "train", "--config-name", config,
            f"trainer.v1.trainer_mode={mode}", f"trainer.total_training_steps={steps}", *overrides, *extra]
    started = time.monotonic()
    with open(out / "run.log", "w") as log:
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            busy = watch_cpu(proc, out)
        finally:  # interrupted here: stop the run (its driver takes its Ray cluster down on SIGTERM)
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{mode}/{workload} exited {proc.returncode}; see {out / 'run.log'}")
    metrics = next(out.glob("*/metrics.jsonl"))  # <experiment_name>/metrics.jsonl
    return {"steps": step_records(metrics), "wall_s": wall,
            "prompts": prompts_drawn(metrics.parent / PROMPTS_FILE), "cores_busy": busy}


def step_records(metrics: Path) -> list[dict]:
    """The training steps' records of a metrics file (validation-only records left out)."""
    return [r for r in read_jsonl(str(metrics)) if "critic/score/mean" in r.get("data", {})]


def cpu_jiffies() -> int | None:
    """Busy time of the whole machine so far, in clock ticks (``/proc/stat``; None where there is none)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return user + nice + system + irq + softirq  # steal and guest time are not this machine's work


def watch_cpu(proc: subprocess.Popen, out: Path, period_s: float = 0.25) -> float | None:
    """Wait for the run; return how many cores the whole machine kept busy over steps 2..N.

    Machine-wide, so every process of the run counts (Ray, TransferQueue, agent loop, both pools) and
    nothing is attached to them: one read of ``/proc/stat`` and one ``stat`` of the metrics file a
    period; the file is read only when it grew. A step's window opens when the previous step's line
    reaches the metrics file.
    """
    arrivals: list[tuple[float, int]] = []  # (time, busy ticks) when each step's line appeared
    steps_seen, size_seen = 0, 0
    while proc.poll() is None:
        time.sleep(period_s)
        now, busy = time.monotonic(), cpu_jiffies()
        metrics = next(out.glob("*/metrics.jsonl"), None)
        if busy is None or metrics is None or metrics.stat().st_size == size_seen:
            continue
        size_seen = metrics.stat().st_size
        steps = len(step_records(metrics))
        if steps > steps_seen:
            arrivals.append((now, busy))
            steps_seen = steps
    if len(arrivals) < 2 or arrivals[-1][0] <= arrivals[0][0]:
        return None
    (t0, b0), (t1, b1) = arrivals[0], arrivals[-1]
    return (b1 - b0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)


def prompts_drawn(ledger: Path) -> dict[int, int]:
    """Prompts taken from the dataloader per step, from the run journal's prompt ledger (every mode).

    It is the rollout's work: the step's batch plus every refill for a group dynamic sampling
    evicted (in sync, twice the evicted count, the surplus discarded; in the async modes, once,
    and the first step also draws the prefetch window).
    """
    drawn: dict[int, int] = {}
    for row in read_jsonl(str(ledger)):
        drawn[row["step"]] = drawn.get(row["step"], 0) + len(row["index"])
    return drawn


def summarize(steps: list[dict], target_acc: float, prompts: dict[int, int] | None = None) -> dict:
    """The figures of one run (steady state: steps 2..N); ``prompts``: prompts drawn per step."""
    steady = [s["data"] for s in steps[1:]]
    drawn = [prompts[s["step"]] for s in steps[1:] if s["step"] in prompts] if prompts else []
    step_s = [d["timing_s/step"] for d in steady]
    gen = [d.get("timing_s/gen", 0.0) for d in steady]
    acc = [s["data"].get("reward_extra/acc/mean", float("nan")) for s in steps]
    elapsed, reached = 0.0, None
    for i, s in enumerate(steps):
        elapsed += s["data"]["timing_s/step"]
        window = acc[max(0, i - 2): i + 1]
        if reached is None and len(window) == 3 and statistics.mean(window) >= target_acc:
            reached = elapsed
    stale = [d["training/off_policy/trajectory_staleness/mean"] for d in steady
             if "training/off_policy/trajectory_staleness/mean" in d]
    return {
        "steps_per_s": len(step_s) / sum(step_s),
        "rollout_s": statistics.median(gen),
        "train_s": statistics.median([s - g for s, g in zip(step_s, gen)]),
        # The actor's update alone: in the async modes it runs beside the rollout on the same cores.
        "update_s": statistics.median([d.get("timing_s/update_actor", 0.0) for d in steady]),
        "weight_sync_s": statistics.median([d.get("timing_s/update_weights", 0.0) for d in steady]),
        "staleness": statistics.mean(stale) if stale else 0.0,
        "acc_last10": statistics.mean(acc[-10:]),
        "time_to_target_s": reached,
        # The rollout's work per step, and (meaningful in sync, where rollout is a phase of its own)
        # the sampling phase's seconds per prompt drawn.
        "prompts_per_step": statistics.mean(drawn) if drawn else None,
        "rollout_s_per_prompt": sum(gen) / sum(drawn) if drawn and len(drawn) == len(gen) else None,
    }


def mean_of(runs: list[dict]) -> dict:
    keys = runs[0].keys()
    out = {}
    for k in keys:
        values = [r[k] for r in runs if r[k] is not None]
        out[k] = statistics.mean(values) if values else None
    out["acc_last10_runs"] = [r["acc_last10"] for r in runs]
    out["steps_per_s_runs"] = [r["steps_per_s"] for r in runs]
    return out


def table(results: dict) -> list[str]:
    lines = []
    for workload, by_mode in results.items():
        sync = by_mode.get("sync")
        lines.append(f"== {workload} ==")
        lines.append(f"{'mode':16}{'steps/s':>9}{'rollout s':>11}{'train s':>9}{'update s':>10}{'wsync s':>9}"
                     f"{'stale':>7}{'acc@10':>8}{'to target s':>13}{'cores busy':>12}")
        for mode, r in by_mode.items():
            ttt = f"{r['time_to_target_s']:.1f}" if r["time_to_target_s"] is not None else "-"
            cores = f"{r['cores_busy']:.2f}" if r.get("cores_busy") is not None else "-"
            lines.append(f"{mode:16}{r['steps_per_s']:9.3f}{r['rollout_s']:11.2f}{r['train_s']:9.2f}"
                         f"{r['update_s']:10.2f}{r['weight_sync_s']:9.3f}{r['staleness']:7.2f}"
                         f"{r['acc_last10']:8.3f}{ttt:>13}{cores:>12}")
        if sync:
            bound = 1.0 / max(sync["rollout_s"], sync["train_s"])
            lines.append(f"overlap bound (sync: rollout {sync['rollout_s']:.2f} s, train {sync['train_s']:.2f} s): "
                         f"{bound:.3f} steps/s = {bound / sync['steps_per_s']:.2f}x sync")
            for mode, r in by_mode.items():
                if mode != "sync":
                    lines.append(f"  {workload} {mode}: {r['steps_per_s'] / sync['steps_per_s']:.2f}x sync steps/s, "
                                 f"{100 * r['steps_per_s'] / bound:.0f} % of the overlap bound")
            lines += work_matched(workload, by_mode)
        for mode, r in by_mode.items():
            if len(r.get("steps_per_s_runs", [])) > 1:
                lines.append(f"  {workload} {mode} steps/s per run: "
                             + ", ".join(f"{v:.3f}" for v in r["steps_per_s_runs"]))
    return lines


def work_matched(workload: str, by_mode: dict) -> list[str]:
    """Each async mode against the bound for the rollout work it actually did.

    With dynamic sampling, a step's rollout work is the prompts it draws, and that follows each run's
    accuracy (a group every answer of which is right, or wrong, is evicted and redrawn) and the mode's
    refill rule, so two runs of one mode can differ by a third. At sync's seconds of rollout a prompt
    ``c`` and sync's training time ``T``, a mode that drew ``P`` prompts a step is bounded by
    ``1 / max(c * P, T)`` steps/s.
    """
    sync = by_mode["sync"]
    per_prompt = sync.get("rollout_s_per_prompt")
    if not per_prompt or sync.get("prompts_per_step") is None:
        return []
    lines = [f"rollout work (prompts drawn a step): sync {sync['prompts_per_step']:.1f}, "
             f"{1000 * per_prompt:.0f} ms of sync rollout a prompt"]
    for mode, r in by_mode.items():
        if mode == "sync" or r.get("prompts_per_step") is None:
            continue
        bound = 1.0 / max(per_prompt * r["prompts_per_step"], sync["train_s"])
        lines.append(f"  {workload} {mode}: {r['prompts_per_step']:.1f} prompts a step; for that work the bound is "
                     f"{bound:.3f} steps/s, {100 * r['steps_per_s'] / bound:.0f} % of it")
    return lines


def plot(raw: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(raw), 2, figsize=(11, 3.6 * len(raw)), squeeze=False)
    for row, (workload, by_mode) in enumerate(raw.items()):
        for i, (mode, runs) in enumerate(by_mode.items()):
            for k, run in enumerate(runs):  # every run of a mode in its colour; the first one marked
                steps = run["steps"]
                x = [s["step"] for s in steps]
                style = {"color": f"C{i}", "label": mode if k == 0 else None,
                         "marker": "o" if k == 0 else None, "alpha": 1.0 if k == 0 else 0.45}
                axes[row][0].plot(x, [s["data"].get("reward_extra/acc/mean") for s in steps], **style)
                axes[row][1].plot(x[1:], [s["data"]["timing_s/step"] for s in steps[1:]], **style)
        axes[row][0].set_title(f"{workload}: trained-batch accuracy")
        axes[row][1].set_title(f"{workload}: step time (s)")
        for ax in axes[row]:
            ax.set_xlabel("step")
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="demo,balanced")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--steps", type=int, default=11)
    ap.add_argument("--repeats", type=int, default=1, help="runs per mode and workload (accuracy: mean over them)")
    ap.add_argument("--target-acc", type=float, default=0.8)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "trainer_modes"))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides added to every run")
    args = ap.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        ap.error(f"--steps {args.steps} --repeats {args.repeats}: accepted --steps >= 2 (step 1 carries the "
                 "start-up and is left out of every figure) and --repeats >= 1")
    workloads, modes = args.workloads.split(","), args.modes.split(",")
    for flag, names, accepted in (("--workloads", workloads, WORKLOADS), ("--modes", modes, MODES)):
        unknown = [name for name in names if name not in accepted]
        if unknown:  # before any asset is built or run launched
            ap.error(f"{flag} {','.join(names)}: unknown {', '.join(map(repr, unknown))}; accepted: a comma-separated "
                     f"list of {list(accepted)}")
    tiny = os.environ.get("VERL_ASCEND_TINY_DIR", str(Path.home() / ".cache" / "verl-ascend" / "tiny"))
    roots = {kind: assets(kind, tiny) for kind in {"first_digit"} | {WORKLOADS[w][1] for w in workloads}}
    out = Path(args.out)
    raw: dict = {}
    results: dict = {}
    total, done = len(workloads) * len(modes) * args.repeats, 0
    for workload in workloads:
        for mode in modes:
            runs = []
            for rep in range(args.repeats):
                done += 1
                print(f"[{done}/{total}] {workload} / {mode} (run {rep + 1})", flush=True)
                runs.append(run_once(mode, workload, args.steps, out / workload / mode / str(rep), roots,
                                     args.overrides))
            raw.setdefault(workload, {})[mode] = runs
            results.setdefault(workload, {})[mode] = mean_of(
                [{**summarize(r["steps"], args.target_acc, r["prompts"]), "cores_busy": r["cores_busy"]}
                 for r in runs])
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(raw, out / "trainer_modes.png")
    for line in table(results):
        print(line)
    print(f"results: {out / 'results.json'}, plot: {out / 'trainer_modes.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
