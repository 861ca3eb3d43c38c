"""Upstream's NPU DAPO launch scripts (verl-recipe ``dapo/`` at 48ea0a7), their overrides appended to
``DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh``: each gets every error upstream would raise at step 1 and
no other.

The override lists are in ``fixtures/upstream_dapo_npu_overrides.yaml`` (source repo, commit and paths noted
there). Each case is one dry run of the real script: it composes, prints and checks, and starts nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.recipe.test_npu_config import _script  # DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh


def dry_run(tmp_path, *overrides, **kwargs):
    """The script's dry run with the memory plan's check off: these cases are about what upstream raises at step 1.

    The plan's own verdicts on these scripts are its subject, not these tests': it says the fsdp2 20k script's
    actor update peaks at 78 GiB on a 910B (its largest term 'activations', 61 GiB, under strategy fsdp2), which no
    host run has confirmed yet (docs/ascend_tutorial/memory.md)."""
    return _script(tmp_path, *overrides, "memory.check=false", **kwargs)

FIXTURE = Path(__file__).with_name("fixtures") / "upstream_dapo_npu_overrides.yaml"
SCRIPTS = yaml.safe_load(FIXTURE.read_text())["scripts"]

# script -> the error rules its dry run reports, each what upstream does with that script under this recipe:
# - gen_batch_size_not_dividing: filtering off, data.gen_batch_size kept and train_batch_size not a multiple of it:
#   PPOTrainer._next_train_batch raises ValueError at step 1 (verl/trainer/ppo/v1/trainer_base.py);
# - overlong_buffer_too_long: overlong_buffer len 4096 > max_resp_len 2048: upstream's dapo reward manager asserts
#   when it starts (verl/experimental/reward_loop/reward_manager/dapo.py);
ERRORS = {
    "run_dapo_qwen2.5_32b_npu": set(),
    "run_dapo_qwen2.5_32b_fsdp2_20k_npu": set(),
    "run_dapo_qwen2.5_32b_fsdp2_4k_npu": {"gen_batch_size_not_dividing"},
    "run_dapo_qwen2.5_7b_npu": set(),
    "run_dapo_qwen2.5_vl_32b_fsdp2_npu": set(),
    "run_dapo_qwen2.5_vl_3b_fsdp2_npu": set(),
    "run_dapo_qwen2.5_vl_7b_fsdp2_npu": {"overlong_buffer_too_long"},
    "run_dapo_qwen3_14b_base_npu": {"gen_batch_size_not_dividing"},
    "run_dapo_qwen3_8b_base_npu": {"gen_batch_size_not_dividing"},
}


# scripts whose reward settings sit under upstream's old reward_model.* keys: upstream composes them and never reads
# them on the V1 path (migrate_legacy_reward_impl runs in fully_async_main only), so it runs without them; the dry run
# warns and names each key's new home, and refuses nothing upstream would not.
LEGACY = {"run_dapo_qwen2.5_7b_npu", "run_dapo_qwen2.5_vl_7b_fsdp2_npu"}


def _errors(report: str) -> set[str]:
    return set(re.findall(r"^\[error\] (\w+):", report, re.M))


def test_every_script_has_its_expectation():
    assert sorted(ERRORS) == sorted(Path(s).stem for s in SCRIPTS) and len(SCRIPTS) == 9


@pytest.mark.e2e
@pytest.mark.parametrize("script", sorted(SCRIPTS), ids=lambda s: Path(s).stem)
def test_upstream_npu_script_gets_the_errors_upstream_raises(tmp_path, script):
    result = dry_run(tmp_path, *SCRIPTS[script])
    report = result.stdout + result.stderr
    expected = ERRORS[Path(script).stem]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert _errors(report) == expected, report[-3000:]
    assert result.returncode == (2 if expected else 0), report[-3000:]
    if not expected:
        assert "doctor verdict: OK (0 error(s)" in report, report[-3000:]
    warned = "[warn] legacy_reward_keys_ignored" in report
    assert warned == (Path(script).stem in LEGACY), report[-3000:]
    if warned:
        assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in report
    # the keys the old list called never read are not reported any more
    for key in ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", "actor_rollout_ref.rollout.router_config_path"):
        assert f"{key}=" not in report.split("# ===== config doctor =====")[-1]


@pytest.mark.e2e
def test_8b_script_batch_arithmetic_names_upstreams_value_error(tmp_path):
    result = dry_run(tmp_path, *SCRIPTS["dapo/run_dapo_qwen3_8b_base_npu.sh"])
    assert result.returncode == 2
    assert ("data.gen_batch_size=48 with data.train_batch_size=16" in result.stderr
            and "'num_prompts (16) must be a positive multiple of gen_batch_size (48)'" in result.stderr)
    assert "accepted: data.gen_batch_size unset, or one dividing 16 (1, 2, 4, 8, 16)" in result.stderr


@pytest.mark.e2e
def test_separate_async_names_the_presets_sync_step_and_the_nodes_it_takes(tmp_path):
    """The 32B script in separate_async: upstream's default parameter_sync_step 4 fits its 128/32 batch, the
    preset's 16 does not, and the refusal says the 16 is the preset's; its trainer.nnodes=2 adds to the preset's
    12 rollout nodes (14 of the launch's 16), and async mode overrides its gen_batch_size=384 to 1."""
    result = dry_run(tmp_path, *SCRIPTS["dapo/run_dapo_qwen2.5_32b_npu.sh"], "trainer.v1.trainer_mode=separate_async")
    report = result.stdout + result.stderr
    assert result.returncode == 2 and _errors(report) == {"separate_async_batch"}, report[-3000:]
    assert "parameter_sync_step=16 is the value of the preset +pools=npu_separate_128" in report
    assert "upstream's default is 4" in report and "trainer.v1.separate_async.parameter_sync_step=4" in report
    assert re.search(r"\[warn\] separate_async_nodes: .*trainer.nnodes=2 \+ actor_rollout_ref.rollout.nnodes=12 .*= 14 "
                     r"nodes of the 16 nodes", report)
    assert "[warn] gen_batch_size_overridden: data.gen_batch_size=384 is overridden to 1 by upstream" in report

    small = dry_run(tmp_path, *SCRIPTS["dapo/run_dapo_qwen2.5_32b_npu.sh"], "trainer.v1.trainer_mode=separate_async",
                    env={"NNODES": "13"})
    refused = small.stdout + small.stderr
    assert small.returncode == 2 and "separate_async_nodes" in _errors(refused), refused[-3000:]
    assert "= 14 nodes, but VERL_ASCEND_CLUSTER_NNODES=13" in refused
    assert "accepted: trainer.nnodes <= 1 with this rollout pool" in refused


@pytest.mark.e2e
def test_no_sync_switch_is_not_called_never_read(tmp_path):
    overrides = [*SCRIPTS["dapo/run_dapo_qwen2.5_32b_npu.sh"],
                 "actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=true"]
    result = dry_run(tmp_path, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    doctor = result.stdout.split("# ===== config doctor =====")[-1]
    assert "use_no_sync_for_gradient_accumulation" not in doctor


@pytest.mark.e2e
def test_legacy_keys_warn_beside_other_culprits_in_one_refusal(tmp_path):
    """An older script's legacy reward keys (a warning) and its errors, in one report and one exit 2."""
    overrides = [*SCRIPTS["dapo/run_dapo_qwen3_8b_base_npu.sh"], "+reward_model.overlong_buffer.len=4096",
                 "actor_rollout_ref.actor.grad_clip=0.5"]
    result = dry_run(tmp_path, *overrides)
    report = result.stdout + result.stderr
    assert result.returncode == 2
    assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in report
    assert "switch_not_reaching_consumer: actor_rollout_ref.actor.grad_clip=0.5" in report
    assert "[warn] legacy_reward_keys_ignored" in report
    assert "REFUSED (2 error(s)" in report and "Traceback" not in result.stderr  # + its gen_batch_size
