"""Every config the recipe ships passes its own doctor under ``--strict`` (warnings refuse too): a shipped
config that the project's own checks call wrong would teach users to ignore them."""

from __future__ import annotations

import pytest

from tests.recipe.helpers import REPO

CONFIG_DIR = REPO / "recipe" / "dapo_ascend" / "config"
# Primary configs name Hydra's searchpath; the others (dapo_base, tiny_cpu) are only building blocks.
SHIPPED = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if "searchpath:" in p.read_text())


def test_the_shipped_configs_are_found():
    assert {"dapo_tiny_cpu", "dapo_demo_cpu", "dapo_tail_cpu", "dapo_qwen25_32b_npu"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_doctor_strict_accepts_the_shipped_config(name, capsys, monkeypatch):
    from recipe.dapo_ascend import doctor

    for var in ("VERL_ASCEND_DOCTOR_IGNORE", "VERL_ASCEND_DOCTOR_STRICT"):
        monkeypatch.delenv(var, raising=False)
    code = doctor.main(["--strict", "--config-name", name])
    out = capsys.readouterr()
    assert code == doctor.EXIT_OK, out.out[-3000:] + out.err[-3000:]
    assert "doctor verdict: OK" in out.out and "0 warning(s)" in out.out


def test_doctor_strict_still_refuses_a_key_only_another_engine_reads(capsys):
    """The rule that refused tiny_cpu's rollout.enforce_eager on hf is still on: the fix moved the key."""
    from recipe.dapo_ascend import doctor

    code = doctor.main(["--strict", "--config-name", "dapo_tiny_cpu", "actor_rollout_ref.rollout.enforce_eager=true"])
    assert code == doctor.EXIT_REFUSED
    assert "key_read_by_other_engine: actor_rollout_ref.rollout.enforce_eager=True" in capsys.readouterr().out
