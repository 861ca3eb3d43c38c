"""The acceptance run's DAPO on a real Ascend host (``verl-ascend accept``, device mode) cannot
run here, but its job can be composed and judged: the overrides it launches the recipe with must
compose on the tiny config and pass the recipe's own checks, at TP 1 and with mc2 at TP 8."""

from __future__ import annotations

import io

import pytest

from verl_ascend.launch import commands
from recipe.dapo_ascend.main_dapo import RECIPE
from verl.ascend.accept import run_check

compose = RECIPE.compose


@pytest.mark.parametrize("tp", [1, 8])
def test_device_overrides_compose_and_the_doctor_accepts_them(tp, tmp_path, tiny_dir, monkeypatch):
    monkeypatch.setenv("VERL_ASCEND_TINY_DIR", str(tiny_dir))
    config = compose(run_check.EXPERIMENT, run_check.overrides(tmp_path, emulated=False, tp=tp))
    out = io.StringIO()
    assert commands.dry_run(config, environ={}, out=out) == 0, out.getvalue()[-3000:]
    assert config.trainer.device == "npu" and config.actor_rollout_ref.rollout.name == "vllm"
    assert config.global_profiler.tool == "npu" and list(config.global_profiler.steps) == [run_check.PROFILED_STEP]
    mc2 = "actor_rollout_ref.rollout -> vllm.additional_config.enable_matmul_allreduce: true" in out.getvalue()
    assert mc2 == (tp > 1)
    assert config.actor_rollout_ref.rollout.profiler.enable == (tp > 1)
    if tp > 1:  # the replica owning rank 0 traces its engine, in discrete mode (or upstream records nothing)
        assert list(config.actor_rollout_ref.rollout.profiler.ranks) == [0]
        assert config.actor_rollout_ref.rollout.profiler.tool_config.npu.discrete is True
