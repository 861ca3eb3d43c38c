"""Typed config sections: each key parsed once, booleans through the one parser, bad values named."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from recipe.dapo_ascend.options import DapoAscendOptions
from verl_ascend.run.trace_check import ProfileCheckOptions
from verl_ascend.run.options import FaultTolerance


def test_fault_tolerance_defaults_and_values():
    assert FaultTolerance.from_config(OmegaConf.create({})) == FaultTolerance()
    cfg = OmegaConf.create({"fault_tolerance": {"rollout_timeout_s": 5, "start_over": "yes", "check_free_space": "false"}})
    ft = FaultTolerance.from_config(cfg)
    assert (ft.rollout_timeout_s, ft.start_over, ft.check_free_space, ft.allow_no_checkpoints) == (5.0, True, False, False)


@pytest.mark.parametrize("key, value, needle", [
    ("start_over", "maybe", "fault_tolerance.start_over='maybe' is not a boolean"),
    ("rollout_timeout_s", "soon", r"fault_tolerance.rollout_timeout_s='soon': expected a number >= 0 \(seconds"),
])
def test_fault_tolerance_bad_values_name_the_key(key, value, needle):
    with pytest.raises(ValueError, match=needle):
        FaultTolerance.from_config(OmegaConf.create({"fault_tolerance": {key: value}}))


def test_profile_check_options():
    assert ProfileCheckOptions.from_config(OmegaConf.create({})) == ProfileCheckOptions(enable=True, strict=False)
    cfg = OmegaConf.create({"profile_check": {"enable": "off", "strict": True}})
    assert ProfileCheckOptions.from_config(cfg) == ProfileCheckOptions(enable=False, strict=True)


def test_recipe_trainer_section():
    section = lambda v: OmegaConf.create({"trainer": {"v1": {"dapo_ascend": {"poll_interval_s": v}}}})
    assert DapoAscendOptions.from_config(section(None)).poll_interval_s is None
    assert DapoAscendOptions.from_config(section(0.05)).poll_interval_s == 0.05
    with pytest.raises(ValueError, match=r"trainer.v1.dapo_ascend.poll_interval_s=0: expected a number > 0"):
        DapoAscendOptions.from_config(section(0))
