"""Unreadable switches stop the entry points with a message naming them, never a traceback."""

from __future__ import annotations

from omegaconf import OmegaConf

from recipe.dapo_ascend import config_schema
from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend import launch
from verl_ascend.launch import commands
from verl_ascend.checks import exits


def test_unreadable_dry_run_exits_2_naming_it(monkeypatch, capsys):
    monkeypatch.setenv("DRY_RUN", "maybe")
    assert launch.launch(RECIPE, OmegaConf.create({})) == 2
    assert "DRY_RUN='maybe' is not a boolean" in capsys.readouterr().err


def test_doctor_with_an_unreadable_strict_switch_exits_2_naming_it(monkeypatch, capsys):
    monkeypatch.setenv("VERL_ASCEND_DOCTOR_STRICT", "maybe")
    assert commands.doctor(["--config-name", "dapo_tiny_cpu"]) == exits.REFUSED
    assert "VERL_ASCEND_DOCTOR_STRICT='maybe' is not a boolean" in capsys.readouterr().err


def test_own_switch_sections_are_typed_before_ray():
    config = OmegaConf.create({"profile_check": {"enable": "maybe"}, "doctor": {"strict": "no"}})
    found = " | ".join(config_schema.problems(config))
    assert "profile_check.enable='maybe': accepted: true or false" in found
    assert "doctor.strict='no': accepted: true or false" in found


def test_doctor_strict_is_read_through_its_declaration(monkeypatch):
    """``doctor.strict`` is read by the toolkit, as DoctorOptions declares it: "no" is not strict (bool("no") would be)."""
    from verl_ascend import checks

    monkeypatch.delenv("VERL_ASCEND_DOCTOR_STRICT", raising=False)
    assert checks.strict_of(OmegaConf.create({"doctor": {"strict": True}})) is True
    assert checks.strict_of(OmegaConf.create({"doctor": {"strict": "no"}})) is False  # refused by config_types
    assert checks.strict_of(OmegaConf.create({})) is False
    assert checks.strict_of(OmegaConf.create({}), {"VERL_ASCEND_DOCTOR_STRICT": "1"}) is True
