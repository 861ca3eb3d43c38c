"""Upstream's main_ppo on the Ascend platform: an unset or uninstalled rollout engine exits 2 in the
driver, inside auto_set_device (seam row ascend_auto_set_device), before validation and Ray."""

from __future__ import annotations

import types

import pytest
from omegaconf import OmegaConf

from verl.ascend.patch import driver_checks


def _module():
    calls = []
    return types.SimpleNamespace(auto_set_device=lambda config: calls.append(config)), calls


def test_unset_rollout_name_exits_2_naming_the_key(capsys):
    module, calls = _module()
    driver_checks.patch_auto_set_device(module)
    config = OmegaConf.create({"trainer": {"device": "npu"}, "actor_rollout_ref": {"rollout": {"name": "???"}}})
    with pytest.raises(SystemExit) as stop:
        module.auto_set_device(config)
    assert stop.value.code == 2 and len(calls) == 1  # upstream's function ran first
    err = capsys.readouterr().err
    assert err.startswith("[verl.ascend] error: actor_rollout_ref.rollout.name is not set") and "'vllm'" in err


def test_a_set_engine_passes_and_the_wrapper_is_applied_once():
    module, calls = _module()
    driver_checks.patch_auto_set_device(module)
    driver_checks.patch_auto_set_device(module)  # idempotent
    module.auto_set_device(OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "hf"}}}))
    assert len(calls) == 1 and not hasattr(module.auto_set_device.__wrapped__, "__verl_ascend_patched__")


def test_installed_only_in_main_ppos_driver():
    assert driver_checks.install() is False  # pytest's __main__ is not verl.trainer.main_ppo
