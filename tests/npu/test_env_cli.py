"""``verl-ascend env``: one VAR=value line per variable with its reason; conflicts exit 2 (refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from verl.ascend.env.cli import main
from verl_ascend.checks.exits import REFUSED

EAGER = "actor_rollout_ref.rollout.enforce_eager"


def lines_for(out: str, var: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"{var}=")]


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("TASK_QUEUE_ENABLE", "VLLM_ASCEND_TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE", "VERL_PLATFORM"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_the_command_prints_task_queue_2_in_eager_mode():
    env = {k: v for k, v in os.environ.items() if k not in ("TASK_QUEUE_ENABLE", "VLLM_ASCEND_TASK_QUEUE_ENABLE")}
    result = subprocess.run(
        [sys.executable, "-m", "verl_ascend", "env", f"{EAGER}=True"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = lines_for(result.stdout, "TASK_QUEUE_ENABLE")
    assert line.startswith("TASK_QUEUE_ENABLE=2  # ") and "eager" in line
    assert all("=" in line and "  # " in line for line in result.stdout.splitlines())


def test_graph_mode_prints_task_queue_1(clean_env, capsys):
    assert main([f"{EAGER}=False"]) == 0
    (line,) = lines_for(capsys.readouterr().out, "TASK_QUEUE_ENABLE")
    assert line.startswith("TASK_QUEUE_ENABLE=1  # ")


def test_a_violated_rule_is_refused_naming_both(clean_env, capsys):
    clean_env.setenv("VERL_PLATFORM", "cuda")
    assert main(["trainer.device=npu"]) == REFUSED == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "VERL_PLATFORM" in captured.err and "trainer.device" in captured.err
    assert "device_npu_platform_mismatch" in captured.err


def test_roles_that_differ_get_one_line_each(clean_env, capsys):
    overrides = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=8"]
    assert main([*overrides, "+ascend.env.host_cpu=aarch64"]) == 0
    out = capsys.readouterr().out
    affinity = lines_for(out, "CPU_AFFINITY_CONF")
    assert [line.split("  # ")[0] for line in affinity] == ["CPU_AFFINITY_CONF=1", "CPU_AFFINITY_CONF=0"]
    assert "[train]" in affinity[0] and "[rollout]" in affinity[1]
    assert lines_for(out, "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE") == []  # mc2 is an engine argument now


def test_json_output(clean_env, capsys):
    assert main(["--json", f"{EAGER}=True", "+ascend.env.host_cpu=x86_64"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["train"]["TASK_QUEUE_ENABLE"]["value"] == "2"
    assert data["host_cpu"] == "x86_64" and data["settings"]["rollout"]["CPU_AFFINITY_CONF"]["value"] == "1"


def test_unknown_config_name_lists_the_available_ones(clean_env, capsys):
    assert main(["--config-name", "no_such_config"]) == 2
    err = capsys.readouterr().err
    assert "no_such_config" in err and "dapo_base" in err


def test_bad_override_exits_2(clean_env, capsys):
    assert main(["actor_rollout_ref.rollout.no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err


def test_bad_value_is_refused_naming_the_key(clean_env, capsys):
    assert main(["+ascend.env.mc2=maybe"]) == REFUSED
    err = capsys.readouterr().err
    assert "ascend.env.mc2" in err and "accepted" in err


@pytest.mark.parametrize(("host", "rollout_line"), [("x86_64", "CPU_AFFINITY_CONF=1"), ("aarch64", "CPU_AFFINITY_CONF=0")])
def test_dry_run_prints_the_rollout_binding_for_the_host_cpu(clean_env, host, rollout_line):
    """DRY_RUN's env section (verl/ascend/env/dry_run.py): the rollout role's line carries the evidence."""
    import io

    from verl_ascend.launch import commands
    from recipe.dapo_ascend.main_dapo import RECIPE
    compose = RECIPE.compose

    config = compose("dapo_qwen25_32b_npu", [f"ascend.env.host_cpu={host}"])
    out = io.StringIO()
    commands.dry_run(config, environ={}, out=out)
    text = out.getvalue()
    rollout = text.split("# --- role rollout", 1)[1].split("# =====", 1)[0]
    (line,) = lines_for(rollout, "CPU_AFFINITY_CONF")
    assert line.startswith(rollout_line + "  # ")
    assert ("cpu_binding.py:801-804" in line) is (host == "x86_64") and f"host CPU {host}" in line
    assert "rollout_cpus_unbound" not in text


def test_doctor_warns_about_an_unbound_rollout_on_x86(clean_env):
    import io

    from verl_ascend.launch import commands
    from recipe.dapo_ascend.main_dapo import RECIPE
    compose = RECIPE.compose

    config = compose("dapo_qwen25_32b_npu", ["ascend.env.host_cpu=x86_64", "+ascend.env.overrides.CPU_AFFINITY_CONF=0"])
    out = io.StringIO()
    commands.dry_run(config, environ={}, out=out)
    doctor = out.getvalue().split("# ===== config doctor =====", 1)[1]
    (finding,) = [line for line in doctor.splitlines() if "rollout_cpus_unbound" in line]
    assert "CPU_AFFINITY_CONF=0 in rollout" in finding and "ascend.env.host_cpu" in finding


def test_the_env_command_composes_a_given_folder_and_refuses_a_missing_config(clean_env, tmp_path, capsys):
    import textwrap

    from verl_ascend.checks.exits import OK

    (tmp_path / "mine.yaml").write_text(textwrap.dedent("""\
        defaults:
          - ppo_trainer
          - _self_
        trainer:
          device: npu
        actor_rollout_ref:
          rollout:
            enforce_eager: true
        """))
    assert main(["--config-dir", str(tmp_path), "--config-name", "mine"]) == OK
    assert "TASK_QUEUE_ENABLE=2  # " in capsys.readouterr().out
    assert main(["--config-dir", str(tmp_path), "--config-name", "other"]) == REFUSED
    assert f"no config 'other' in {tmp_path.resolve()}; available: mine" in capsys.readouterr().err
