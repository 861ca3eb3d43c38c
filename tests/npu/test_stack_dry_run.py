"""Declared target stacks through ``DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh`` (e2e: a run script).

The rule functions are tested in-process in test_stack_surface.py; this is the one end-to-end check
that the dry run prints those findings and exits as the issue requires.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.launch import require_e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "dapo_qwen25_32b_npu.sh"
USER_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.mc2_comm_alg"


def dry_run(tmp_path, *args):
    require_e2e("examples/dapo_qwen25_32b_npu.sh")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "VERL_ASCEND_TARGET_", "HCCL_"))}
    environ.update({"DRY_RUN": "1", "PYTHON": os.environ.get("PYTHON_FOR_TESTS", "python"), "HOME": str(tmp_path)})
    environ.setdefault("VERL_ASCEND_MEMORY_CACHE", os.path.expanduser("~/.cache/verl-ascend/memory"))  # HOME is tmp_path
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300
    )


@pytest.mark.e2e
def test_declared_stacks_in_the_dry_run(tmp_path):
    run = dry_run(tmp_path, "ascend.stack.vllm_ascend=0.25.1rc1")
    assert run.returncode == 0, run.stderr[-2000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("[warn] stack_pin_conflict")]
    assert "vllm-ascend 0.25.1rc1 pins transformers==5.14.1" in line
    assert "verl 0.9.1 requires transformers!=5.6.0,<5.11,>=5.5.3" in line

    run = dry_run(tmp_path, "ascend.stack.vllm_ascend=99.0.0", f"+{USER_KEY}=fused")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("[warn] switch_unknown_to_stand_in")]
    assert USER_KEY in line and "stand-in snapshot of vllm-ascend 0.25.1rc1" in line
    assert "switch_unavailable" not in run.stdout
    assert "vllm-ascend 99.0.0 has no snapshot of its own" in run.stdout
    assert list(tmp_path.iterdir()) == []
