"""verl/cpu/checks.py declares exactly the keys the CPU platform fills in a separate_async launch."""

from __future__ import annotations

import copy

from omegaconf import OmegaConf

from recipe.dapo_ascend.main_dapo import RECIPE
from verl.cpu import checks as cpu_checks
from verl.cpu import config_defaults

compose = RECIPE.compose


def test_declared_launch_defaults_are_what_config_defaults_fills():
    config = compose("dapo_tiny_cpu", ["trainer.v1.trainer_mode=separate_async",
                                       "actor_rollout_ref.rollout.nnodes=0", "actor_rollout_ref.rollout.n_gpus_per_node=0"])
    before = copy.deepcopy(config)
    config_defaults.apply(config)
    changed = {key for key in cpu_checks.launch_defaults()
               if OmegaConf.select(before, key) != OmegaConf.select(config, key)}
    assert changed == set(cpu_checks.launch_defaults())


def test_the_backend_registers_them_with_the_checks():
    from verl_ascend import checks
    from verl_ascend.checks import rules_async

    checks.rules()  # loads the entry points
    assert set(cpu_checks.launch_defaults()) <= set(rules_async._LAUNCH_DEFAULTS["cpu"])
