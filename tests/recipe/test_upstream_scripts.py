"""Upstream's current NPU DAPO launch scripts (verl-recipe ``dapo/`` at 48ea0a7), their overrides appended
to ``DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh``: accepted (exit 0) with no error finding.

The override lists are in ``fixtures/upstream_dapo_npu_overrides.yaml`` (source repo, commit and paths noted
there). Each case is one dry run of the real script: it composes, prints and checks, and starts nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.recipe.test_npu_config import _script as dry_run  # DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh

FIXTURE = Path(__file__).with_name("fixtures") / "upstream_dapo_npu_overrides.yaml"
SCRIPTS = yaml.safe_load(FIXTURE.read_text())["scripts"]


@pytest.mark.e2e
@pytest.mark.parametrize("script", sorted(SCRIPTS), ids=lambda s: Path(s).stem)
def test_upstream_npu_script_is_accepted(tmp_path, script):
    result = dry_run(tmp_path, *SCRIPTS[script])
    report = result.stdout
    assert result.returncode == 0, (result.stderr[-3000:], report[-3000:])
    assert "doctor verdict: OK (0 error(s)" in report, report[-3000:]
    assert "[error]" not in report and "Traceback" not in result.stderr
    # the keys the old list called never read are not reported any more
    for key in ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", "actor_rollout_ref.rollout.router_config_path"):
        assert f"{key}=" not in report.split("# ===== config doctor =====")[-1]


@pytest.mark.e2e
def test_no_sync_switch_is_not_called_never_read(tmp_path):
    overrides = [*SCRIPTS["dapo/run_dapo_qwen2.5_32b_npu.sh"],
                 "actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=true"]
    result = dry_run(tmp_path, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    doctor = result.stdout.split("# ===== config doctor =====")[-1]
    assert "use_no_sync_for_gradient_accumulation" not in doctor


@pytest.mark.e2e
def test_legacy_keys_and_other_culprits_in_one_refusal(tmp_path):
    """An older script's legacy reward keys and its other errors, in one report and one exit 2."""
    overrides = [*SCRIPTS["dapo/run_dapo_qwen3_8b_base_npu.sh"], "reward_model.overlong_buffer.len=4096",
                 "actor_rollout_ref.actor.grad_clip=0.5"]
    result = dry_run(tmp_path, *overrides)
    assert result.returncode == 2
    assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in result.stderr
    assert "switch_not_reaching_consumer: actor_rollout_ref.actor.grad_clip=0.5" in result.stderr
    assert "REFUSED (2 error(s)" in result.stderr and "Traceback" not in result.stderr
