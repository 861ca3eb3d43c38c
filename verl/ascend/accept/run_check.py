"""Checks 4 and 5: a 2-step tiny DAPO on one device, and its profiled step's trace.

One run of the recipe (``python -m verl_ascend train --config-name dapo_tiny_cpu``, a
subprocess as a user starts it: this backend does not import the recipe) on the generated tiny
model, with ``trainer.device=npu``, the env profile and the fused ops; step 2 is profiled.

- check 4 (``dapo``): both steps wrote metrics, and the patched forwards ran their fused kernels
  (the counts of :mod:`verl.ascend.ops.counts`, written by every training process); each step's weight sync
  is recorded from upstream's own timer of it (``timing_s/update_weights``, ``marked_timer("update_weights")``
  in ``trainer_<mode>.py``). With ``--trainer-mode separate_async`` that is the HCCL broadcast from the
  trainer into a rollout pool of its own: the first measurement of what the async guide can only estimate,
  and the check fails without it;
- check 5 (``trace``): the step-2 trace is on disk (``verl_ascend.run.trace_check``), and the report's
  checklist finds the fused kernels RmsNorm, SwiGlu, RotaryMul in it, and MatmulAllReduce when mc2
  at rollout TP > 1 was asked for. Under the emulator there are no device kernels: the emulator's
  op ranges (``verl.ascend.emulator.TRACE_PREFIX``) in the CPU trace stand in for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from verl.ascend.accept.record import Check
from verl.ascend.ops import KERNELS
from verl.ascend.ops import counts as op_counts
from verl_ascend import trainer_mode

EXPERIMENT = "dapo_tiny_cpu"
STEPS = 2
PROFILED_STEP = 2
KERNEL_ITEMS = {"rms_norm": "fused_rmsnorm", "swiglu": "fused_swiglu", "rotary_mul": "fused_rotary"}
MC2_ITEM = "mc2_matmul_allreduce"


SYNC, SEPARATE = "sync", "separate_async"
TRAINER_MODES = (SYNC, SEPARATE)
SYNC_TIMER = "timing_s/update_weights"  # upstream's marked_timer("update_weights") around each step's sync


def mode_overrides(mode: str, tp: int) -> list[str]:
    """``separate_async`` on one host: the trainer on its cards, a rollout pool of ``tp`` cards beside them
    (one replica), weights moved by upstream's HCCL engine (registered as ``nccl``), one sync a step."""
    if mode == SYNC:
        return []
    return [f"{trainer_mode.KEY}={SEPARATE}", "trainer.v1.separate_async.parameter_sync_step=1",
            "actor_rollout_ref.rollout.nnodes=1", f"actor_rollout_ref.rollout.n_gpus_per_node={tp}",
            "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"]


def overrides(folder: Path, emulated: bool, tp: int, mode: str = SYNC) -> list[str]:
    """Hydra overrides of the run: 2 steps, step 2 profiled, fused-op counts into ``folder``."""
    args = ["trainer.device=npu", f"trainer.total_training_steps={STEPS}",
            f"+ray_kwargs.ray_init.runtime_env.env_vars.{op_counts.ENV}={folder / 'fused_op_counts'}",
            f"global_profiler.steps=[{PROFILED_STEP}]", *mode_overrides(mode, tp)]
    if emulated:  # the NPU emulator, verl.cpu's hf rollout server and torch.profiler on the CPU
        return args + ["+ray_kwargs.ray_init.resources={NPU:1}", "+profile=cpu"]
    args += ["actor_rollout_ref.rollout.name=vllm", "+profile=npu_train"]
    if tp > 1:  # mc2 needs a rollout TP > 1: profile the rollout too, and ask for it
        args += [f"trainer.n_gpus_per_node={tp}", f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
                 # 8 prompts x 8 samples over tp data-parallel ranks: micro-batches of one
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
                 "++ascend.env.mc2=true", "actor_rollout_ref.rollout.profiler.enable=true",
                 "++actor_rollout_ref.rollout.profiler.tool_config.npu.discrete=true",
                 "++actor_rollout_ref.rollout.profiler.ranks=[0]"]
    return args


def launch(folder: Path, tiny: Path, emulated: bool, tp: int, timeout_s: float,
           mode: str = SYNC) -> subprocess.CompletedProcess:
    env = {**os.environ, "VERL_ASCEND_TINY_DIR": str(tiny), "VERL_ASCEND_OUTPUT_DIR": str(folder),
           "VERL_ASCEND_PROFILE_DIR": str(folder / "profile"), "PYTHONUNBUFFERED": "1"}
    env.pop("VERL_FILE_LOGGER_PATH", None)
    if emulated:
        env["VERL_ASCEND_NPU_EMULATOR"] = "1"
    cmd = [sys.executable, "-m", "verl_ascend", "train", "--config-name", EXPERIMENT,
           *overrides(folder, emulated, tp, mode)]
    (folder / "command.txt").write_text(" ".join(cmd) + "\n")
    with open(folder / "run.log", "w") as log:
        return subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)


def step_metrics(metrics: Path) -> dict[int, dict]:
    if not metrics.is_file():
        return {}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return {r["step"]: r["data"] for r in records if "critic/score/mean" in r["data"]}  # the memory metrics too


def memory_value(folder: Path, tiny: Path, emulated: bool, tp: int) -> dict:
    """The memory plan of the run's own config next to what the run measured (upstream's
    ``perf/max_memory_allocated_gb`` / ``_reserved_gb``, the training process's torch.npu peaks), so the
    first host run calibrates the plan (``verl_ascend/memory/measured.py``; on the emulator the figures
    are the CPU process's peak RSS)."""
    from verl_ascend.launch.recipe import registered_recipe
    from verl_ascend.memory.measured import compare_config

    try:
        config = registered_recipe().compose(EXPERIMENT, [f"tiny_dir={tiny}", *overrides(folder, emulated, tp)])
    except Exception as exc:  # noqa: BLE001 -- the record says why, the other checks stand
        return {"error": f"the run's config does not compose here: {exc}"}
    return compare_config(config, step_metrics(folder / EXPERIMENT / "metrics.jsonl"))


def weight_sync(steps: dict[int, dict], mode: str) -> dict:
    """Each step's weight sync in seconds, as upstream timed it, and where it went."""
    where = ("HCCL broadcast from trainer rank 0 into the standalone rollout pool" if mode == SEPARATE else
             "into the rollout replicas colocated with the trainer")
    return {trainer_mode.FIELD: mode, "metric": SYNC_TIMER, "what": where,
            "seconds": {s: d[SYNC_TIMER] for s, d in sorted(steps.items()) if SYNC_TIMER in d}}


def dapo_check(folder: Path, returncode: int, emulated: bool, mode: str = SYNC) -> Check:
    check = Check("dapo", f"a {STEPS}-step tiny DAPO ({mode}) on one host with the fused ops and the env profile")
    steps = step_metrics(folder / EXPERIMENT / "metrics.jsonl")
    per_process = op_counts.read(folder / "fused_op_counts") if (folder / "fused_op_counts").is_dir() else {}
    totals = {op: sum(c.get(op, 0) for c in per_process.values()) for op in KERNELS}
    check.value = {"exit_status": returncode, "steps_with_metrics": sorted(steps),
                   "score_mean": {s: d["critic/score/mean"] for s, d in sorted(steps.items())},
                   "step_time_s": {s: d.get("timing_s/step") for s, d in sorted(steps.items())},
                   "fused_kernel_calls": totals, "processes_counting": len(per_process),
                   "weight_sync": weight_sync(steps, mode), "log": str(folder / "run.log")}
    if returncode != 0:
        check.fail(f"the recipe exited {returncode}; see {folder / 'run.log'}")
    missing = [s for s in range(1, STEPS + 1) if s not in steps]
    if missing:
        check.fail(f"no metrics for step(s) {missing} in {folder / EXPERIMENT / 'metrics.jsonl'}")
    unsynced = [s for s in sorted(steps) if s not in check.value["weight_sync"]["seconds"]]
    if mode == SEPARATE and unsynced:
        check.fail(f"no weight-sync time ({SYNC_TIMER}) for step(s) {unsynced}: the separate_async run is what "
                   "measures the sync the async guide estimates")
    for op, calls in totals.items():
        if not calls:
            check.fail(f"the fused {op} forward never ran its kernel {KERNELS[op]} in any training process")
    if emulated:
        check.device_only.append("torch_npu on the device; vLLM-Ascend as the rollout engine")
        check.stands_in.append("the NPU emulator (VERL_ASCEND_NPU_EMULATOR=1) for torch_npu, and verl.cpu's hf "
                               "rollout server; the fused-kernel counts are the emulator ops the patch called")
    return check


def emulator_ranges(paths: list[Path]) -> dict[str, int]:
    """op -> number of emulator op ranges (``TRACE_PREFIX + op``) in these Chrome traces."""
    from verl.ascend.emulator import TRACE_PREFIX
    from verl_ascend.report.chrome_trace import ChromeTraceReader

    found: dict[str, int] = {}
    for path in paths:
        for event in ChromeTraceReader(path).events():
            name = event.get("name", "") if isinstance(event, dict) else ""
            if isinstance(name, str) and name.startswith(TRACE_PREFIX) and event.get("ph") == "X":
                op = name[len(TRACE_PREFIX):]
                found[op] = found.get(op, 0) + 1
    return found


def trace_kernels_check(folder: Path, emulated: bool, tp: int, mc2_requested: bool, run_ok: bool = True) -> Check:
    from verl_ascend.run.trace_check import check_traces, find_traces
    from verl_ascend.report.report import build_report

    check = Check("trace", f"the profiled step {PROFILED_STEP}: its trace holds the expected kernels")
    if not run_ok:
        check.fail(f"no profiled step to read: the dapo run failed (see {folder / 'run.log'})")
        check.value["traces"] = []
        return check
    save_path = folder / "profile"
    kinds = ["train", "rollout"] if mc2_requested and not emulated else ["train"]
    for line in check_traces(save_path, PROFILED_STEP, kinds):
        check.fail(line)
    traces = find_traces(save_path, "train", step=PROFILED_STEP)
    check.value["traces"] = [str(p.relative_to(folder)) for p in traces]
    if emulated:
        ranges = emulator_ranges(traces)
        check.value["emulator_op_ranges"] = ranges
        for op, kernel in KERNELS.items():
            name = kernel.rsplit(".", 1)[1]
            if not ranges.get(name):
                check.fail(f"no {name} range in the step-{PROFILED_STEP} training trace")
        check.device_only += ["device kernels RmsNorm, SwiGlu, RotaryMul in the trace (the emulator emits none)",
                              "MatmulAllReduce (mc2): vLLM's CPU build has no MatmulAllReduce, and one device "
                              f"means rollout TP {tp}"]
        check.stands_in.append("the emulator's op ranges (verl_ascend.emulator::npu_*) in the CPU torch.profiler "
                               "trace of the training step")
        return check
    from verl_ascend.report.offline import OfflineParseError, analyse_offline

    try:  # upstream's npu tool exports Db only; the report reads the text export
        for left in analyse_offline(save_path, export_type="text"):
            check.fail(f"{left}: torch_npu could not parse it (see its logs/)")
    except OfflineParseError as e:
        check.fail(str(e))
    items = {i["id"]: i for i in build_report([save_path]).data["checklist"]}
    wanted = list(KERNEL_ITEMS.values()) + ([MC2_ITEM] if mc2_requested else [])
    check.value["checklist"] = {key: f"{items[key]['status']}: {items[key]['detail']}" for key in wanted if key in items}
    for key in wanted:
        status = items.get(key, {}).get("status")
        if status != "active":
            check.fail(f"{key}: {status or 'not in the report'}; {items.get(key, {}).get('fix', '')}".rstrip("; "))
    if not mc2_requested:
        check.value["mc2"] = f"not requested (rollout TP {tp}); run with --tp 8 on an 8-device host to check it"
    return check
