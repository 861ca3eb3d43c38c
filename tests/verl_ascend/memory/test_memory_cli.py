"""``verl-ascend memory`` and the checks on real config files: the verdict's exit status, the names a
refusal gives, the JSON and the plot, bad input, and the doctor refusing before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from verl_ascend.checks import exits
from verl_ascend.launch.commands import memory as main

REPO = Path(__file__).resolve().parents[3]
BIG = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
JOB = "dapo_qwen25_32b_npu"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in ("HCCL_BUFFSIZE", "VLLM_CPU_KVCACHE_SPACE", "VERL_ASCEND_DOCTOR_IGNORE", "VERL_ASCEND_DOCTOR_STRICT"):
        monkeypatch.delenv(var, raising=False)


def test_the_shipped_job_fits_with_table_json_and_plot(tmp_path, capsys):
    code = main(["--config-name", JOB, "--no-advice", "--plot", str(tmp_path / "m.png"),
                 "--json", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert code == exits.OK, out
    assert "phase" in out and "dominant term" in out and "verdict: fits" in out
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["fits"] is True and data["over"] == []
    assert {p["name"] for p in data["phases"]} >= {"rollout", "actor update"}
    assert data["rollout"]["seqs_max"] > 0 and data["rollout"]["block_size"] == 128
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_65536_tokens_exit_2_naming_phase_term_and_keys(capsys):
    code = main(["--config-name", JOB, "--no-advice", f"{BIG}=65536"])
    err = capsys.readouterr().err
    assert code == exits.REFUSED
    assert "refused: does not fit: phase 'actor update'" in err and BIG in err and "largest term" in err


@pytest.mark.e2e  # minutes, not a launch: the advice plans the 32B job up to 8 times, each a fresh trace (~35 s)
def test_the_config_edited_to_fit_passes_and_advice_is_confirmed(capsys):
    """The advice's largest actor budget, applied, still fits (the third plan confirmed it)."""
    assert main(["--config-name", JOB, f"{BIG}=65536"]) == exits.REFUSED
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith(f"advice: {BIG}="))
    budget = int(line.split("=", 1)[1].split(":", 1)[0])
    assert 2816 <= budget < 65536
    assert main(["--config-name", JOB, "--no-advice", f"{BIG}={budget}"]) == exits.OK
    assert "gpu_memory_utilization=" in out and "sequences per replica" in out


@pytest.mark.parametrize("value, needle", [("0", "memory.device_gib=0"), ("lots", "memory.device_gib='lots'"),
                                           ("-1", "memory.device_gib=-1")])
def test_bad_device_memory_exit_2_naming_the_key(value, needle, capsys):
    code = main(["--config-name", JOB, "--no-advice", f"memory.device_gib={value}"])
    err = capsys.readouterr().err
    assert code == exits.REFUSED and needle in err and "a positive number of GiB" in err and "Traceback" not in err


def test_a_model_without_config_json_exit_2_naming_the_key(tmp_path, capsys):
    code = main(["--config-name", JOB, "--no-advice", f"actor_rollout_ref.model.path={tmp_path}"])
    err = capsys.readouterr().err
    assert code == exits.REFUSED and "actor_rollout_ref.model.path" in err and "config.json" in err


def test_the_doctor_refuses_the_job_that_does_not_fit(capsys):
    from verl_ascend.launch.commands import doctor

    code = doctor(["--config-name", JOB, f"{BIG}=65536"])
    out = capsys.readouterr().out
    assert code == exits.REFUSED
    assert "[error] memory_exceeds_device" in out and "'actor update'" in out and BIG in out
    assert doctor(["--config-name", JOB, f"{BIG}=65536", "memory.check=false"]) == exits.OK


@pytest.mark.e2e
def test_dry_run_of_the_32b_script_exits_2_before_anything_starts(tmp_path):
    """The acceptance command: ``DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh ...=65536``."""
    from tests.launch import require_e2e

    require_e2e("examples/dapo_qwen25_32b_npu.sh")
    env = dict(os.environ, DRY_RUN="1", PYTHON="python", HOME=str(tmp_path))
    env.setdefault("VERL_ASCEND_MEMORY_CACHE", os.path.expanduser("~/.cache/verl-ascend/memory"))  # HOME is tmp_path
    env.pop("HCCL_BUFFSIZE", None)
    done = subprocess.run(["bash", str(REPO / "examples" / "dapo_qwen25_32b_npu.sh"), f"{BIG}=65536"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == exits.REFUSED, text[-3000:]
    assert "# ===== memory plan" in done.stdout and "memory_exceeds_device" in text and BIG in text
    assert "'actor update'" in text and "nothing started" in done.stdout
    assert not list(tmp_path.rglob("*.log"))  # no Hydra run folder, no log: nothing ran
