"""What upstream's separate_async trainer asserts inside Ray is refused before it by the real entry point
(in-process ``main_with_config`` on the tiny CPU config, exit 2, upstream's formula and the keys named),
after the CPU platform's launch defaults were applied (``preflight.prepare``: ``auto_set_device`` first);
and ``DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh trainer.v1.trainer_mode=separate_async`` prints the
pools, the HCCL engine and the sync frequency, and refuses a batch upstream would assert on (e2e: a script).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.launch import require_e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "dapo_qwen25_32b_npu.sh"
SYNC_STEP = "trainer.v1.separate_async.parameter_sync_step"
FORMULA = "train_batch_size == parameter_sync_step * ppo_mini_batch_size"


def test_batch_arithmetic_is_refused_at_launch_naming_upstreams_formula(entry, tmp_path):
    # tiny_cpu: data.train_batch_size 8, ppo_mini_batch_size 8 -> 2 x 8 = 16 != 8
    result = entry("trainer.v1.trainer_mode=separate_async", f"{SYNC_STEP}=2")
    text = result.stdout + result.stderr
    assert result.returncode == 2, text[-3000:]
    assert FORMULA in text and f"{SYNC_STEP}=2" in text and "data.train_batch_size=8" in text
    assert "separate_async_batch" in text and "Traceback" not in text
    assert entry.started == [] and not (tmp_path / "out").exists()


def test_a_naive_engine_the_user_chose_is_not_what_the_launch_refuses_on_cpu(entry):
    """The CPU platform replaces naive by its gloo engine before the checks: no separate_async_engine refusal."""
    result = entry("trainer.v1.trainer_mode=separate_async", f"{SYNC_STEP}=1",
                   "actor_rollout_ref.rollout.checkpoint_engine.backend=naive")
    assert "separate_async_engine" not in result.stdout + result.stderr


DEMO = "dapo_demo_cpu"  # 8 prompts x 16 samples, 4 updates of 2 prompts, parameter_sync_step 4, bypass mode on
RECOMPUTE = "algorithm.rollout_correction.bypass_mode=false"


def test_log_prob_micro_batch_of_each_old_log_prob_pass_is_refused_at_launch(entry):
    """Recomputed old log-probs in separate_async: each of the 4 local updates of a step recomputes 2 x 16 = 32
    responses; tiny_cpu's log_prob_micro_batch_size_per_gpu 64 stops upstream's worker at step 1 (measured:
    'data size must be divisible by force_group_size * micro_batch_size_per_gpu')."""
    result = entry("trainer.v1.trainer_mode=separate_async", RECOMPUTE, config_name=DEMO)
    text = result.stdout + result.stderr
    assert result.returncode == 2, text[-3000:]
    assert ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 does not divide the 32 responses each "
            "data-parallel rank gets per old-log-prob pass (data.train_batch_size=8 / "
            f"{SYNC_STEP}=4 prompts") in text
    assert "accepted: one of [1, 2, 4, 8, 16, 32]" in text and entry.started == []


@pytest.mark.parametrize("overrides", [
    (),  # the demo as shipped: bypass mode reuses the rollout's log-probs, no recomputation pass
    (RECOMPUTE, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32"),
    ("trainer.v1.trainer_mode=sync", RECOMPUTE),  # sync: one pass over 8 x 16 = 128 responses
], ids=["bypass", "recompute-32", "sync-recompute"])
def test_log_prob_micro_batch_that_upstream_accepts_passes_the_doctor(tiny_dir, overrides):
    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend.checks import rules_layout
    from verl_ascend.checks.view import ConfigView

    mode = () if any("trainer_mode" in o for o in overrides) else ("trainer.v1.trainer_mode=separate_async",)
    view = ConfigView(RECIPE.compose(DEMO, [f"tiny_dir={tiny_dir}", *mode, *overrides]))
    assert view.get_int("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu") in (32, 64)
    assert not [f for f in rules_layout.batch_divisibility(view) if "log_prob" in f.message]


def _script(tmp_path, *args, env=None):
    require_e2e("examples/dapo_qwen25_32b_npu.sh")
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("VLLM_", "VERL_ASCEND_TARGET_", "HCCL_", "VERL_ASCEND_DOCTOR", "TASK_QUEUE"))}
    environ.update({"DRY_RUN": "1", "PYTHON": os.environ.get("PYTHON_FOR_TESTS", "python"), "HOME": str(tmp_path)})
    # the memory plan's trace cache stays in the real home (HOME is the test's folder, which must stay empty)
    environ.setdefault("VERL_ASCEND_MEMORY_CACHE", os.path.expanduser("~/.cache/verl-ascend/memory"))
    environ.update(env or {})
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=environ, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.e2e
def test_script_dry_run_of_separate_async_prints_pools_engine_and_sync_frequency(tmp_path):
    run = _script(tmp_path, "trainer.v1.trainer_mode=separate_async")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    out = run.stdout
    assert "trainer pool (trainer.nnodes x trainer.n_gpus_per_node): 4 x 8 = 32 cards" in out
    assert "12 x 8 = 96 cards, 12 standalone replica(s) at TP 8" in out
    assert "nccl -> HCCLCheckpointEngine (verl/checkpoint_engine/hccl_checkpoint_engine.py) on npu" in out
    assert "once per step, after 16 mini-batch update(s) of 32 prompts" in out
    assert "# rollout pool (actor_rollout_ref.rollout.nnodes x n_gpus_per_node" in out  # its env roles, card mapping
    assert "doctor verdict: OK" in out and list(tmp_path.iterdir()) == []

    run = _script(tmp_path, "trainer.v1.trainer_mode=separate_async", env={"ROLLOUT_NNODES": "8"})
    assert run.returncode == 0 and "8 x 8 = 64 cards, training workers" in run.stdout


@pytest.mark.e2e
def test_script_dry_run_refuses_what_upstream_asserts_in_ray(tmp_path):
    run = _script(tmp_path, "trainer.v1.trainer_mode=separate_async", f"{SYNC_STEP}=4")
    assert run.returncode == 2
    assert FORMULA in run.stdout and "4 x 32 = 128 != 512" in run.stdout
    run = _script(tmp_path, "trainer.v1.trainer_mode=separate_async", env={"ROLLOUT_NNODES": "16"})
    assert run.returncode == 2 and "ROLLOUT_NNODES=16 leaves no trainer node" in run.stderr
    run = _script(tmp_path, env={"ROLLOUT_NNODES": "4"})
    assert run.returncode == 2 and "only with trainer.v1.trainer_mode=separate_async" in run.stderr


# ---------------------------------------------------------------- issue 39: the sampler and the engine's values
THRESHOLD, STRATEGY = "trainer.v1.sampler.max_off_policy_threshold", "trainer.v1.sampler.max_off_policy_strategy"
ENGINE = "actor_rollout_ref.rollout.checkpoint_engine"
TIMEOUT = f"{ENGINE}.engine_kwargs.gloo.timeout_s"
# Each group holds values that can go together: the pipeline names every culprit at once.
BAD_VALUES = {
    "negative": ([f"{THRESHOLD}=-1", f"{STRATEGY}=bogus", f"{ENGINE}.backend=bogus", f"+{TIMEOUT}=-1"],
                 [f"{THRESHOLD}=-1", f"{STRATEGY}='bogus'", "['drop', 'wait']", "replay_buffer.py::ReplayBuffer.__init__",
                  f"{ENGINE}.backend='bogus' is registered", f"{TIMEOUT}=-1: accepted: a number of seconds > 0",
                  "GlooCheckpointEngine"]),
    "zero": ([f"{THRESHOLD}=0", f"{ENGINE}.backend=hccl", f"+{TIMEOUT}=0"],
             [f"{THRESHOLD}=0", "an integer >= 1", f"{ENGINE}.backend='hccl' is registered",
              "registers under the name 'nccl'", f"{TIMEOUT}=0: accepted"]),
    "text": ([f"{THRESHOLD}=abc", f"+{TIMEOUT}=abc"], [f"{THRESHOLD}='abc'", f"{TIMEOUT}='abc': accepted"]),
}
CPU_MODES = {"sync": [], "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
             "separate_async": ["trainer.v1.trainer_mode=separate_async", f"{SYNC_STEP}=1"]}
NPU_MODES = {"sync": [], "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
             "separate_async": ["+pools=npu_separate_128"]}


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("group", BAD_VALUES)
def test_sampler_and_engine_values_are_refused_at_launch_on_cpu(entry, tmp_path, mode, group):
    overrides, needles = BAD_VALUES[group]
    if group == "text" and mode == "separate_async":
        # The CPU platform makes the engine gloo here and refuses its arguments first (config_defaults, the same
        # declaration), before the pipeline: one culprit. The threshold alone is refused by the pipeline.
        _refused_at_launch(entry, tmp_path, [*CPU_MODES[mode], f"{THRESHOLD}=abc"], [f"{THRESHOLD}='abc'"])
        needles = [f"{TIMEOUT}='abc': accepted"]
    text = _refused_at_launch(entry, tmp_path, [*CPU_MODES[mode], *overrides], needles)
    if group == "zero" and mode == "separate_async":  # the engine module the CPU platform names at launch
        assert "['gloo'] (registered by verl.cpu.checkpoint_engine)" in text


def _refused_at_launch(entry, tmp_path, overrides, needles) -> str:
    result = entry(*overrides)
    text = result.stdout + result.stderr
    assert result.returncode == 2, text[-3000:]
    missing = [n for n in needles if n not in text]
    assert missing == [] and "Traceback" not in text, (missing, text[-3000:])
    assert entry.started == [] and not (tmp_path / "out").exists()
    return text


@pytest.mark.parametrize("mode", NPU_MODES)
@pytest.mark.parametrize("group", BAD_VALUES)
def test_sampler_and_engine_values_are_refused_by_the_npu_dry_run(mode, group, capsys):
    import io

    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend.launch.commands import dry_run

    overrides, needles = BAD_VALUES[group]
    out = io.StringIO()
    code = dry_run(RECIPE.compose("dapo_qwen25_32b_npu", [*NPU_MODES[mode], *overrides]), environ={}, out=out)
    text = out.getvalue() + capsys.readouterr().err
    assert code == 2 and "trainer:\n" in text  # the composed config printed: trainer.device=npu
    missing = [n for n in needles if n not in text]
    assert missing == [] and "Traceback" not in text, missing


def test_legitimate_sampler_and_engine_values_start(entry):
    """A null threshold (no staleness bound: the doctor's and the dry run's note), wait, gloo with its timeout on a
    CPU: accepted."""
    result = entry(*CPU_MODES["separate_async"], f"{THRESHOLD}=null", f"{STRATEGY}=wait", f"{ENGINE}.backend=gloo",
                   f"+{TIMEOUT}=30")
    text = result.stdout + result.stderr
    assert result.returncode == 0 and len(entry.started) == 1, text[-3000:]
    assert entry.started[0].actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.gloo.timeout_s == 30
