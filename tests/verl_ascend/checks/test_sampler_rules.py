"""verl_ascend.checks.rules_sampler and engine_modules: what the rules claim about upstream is read from
upstream (its replay buffer's assertions, its estimators run on groups of one response), and each rule on
the recipe's real configs refuses exactly the values upstream would stop on inside Ray."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest
import torch

from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend import checks
from verl_ascend.checks import engine_modules, rules_async, rules_sampler

compose = RECIPE.compose

NO_ENV: dict[str, str] = {}
GROUP_FREE = {"gae", "reinforce_plus_plus", "remax"}  # upstream's estimators that need no group


def _found(config_name, overrides, rule):
    return [f for f in checks.validate(compose(config_name, overrides), NO_ENV) if f.rule == rule]


# ------------------------------------------------------------------ what the rules claim about upstream
def _replay_buffer_asserts() -> list[str]:
    from verl.trainer.ppo.v1 import replay_buffer

    tree = ast.parse(inspect.getsource(replay_buffer.ReplayBuffer.__init__).strip())
    return [ast.unparse(node.test) for node in ast.walk(tree) if isinstance(node, ast.Assert)]


def test_upstreams_replay_buffer_asserts_what_the_rule_says():
    asserts = _replay_buffer_asserts()
    assert "isinstance(self.max_off_policy_threshold, int) and self.max_off_policy_threshold > 0" in asserts
    assert f"self.max_off_policy_strategy in {list(rules_sampler.STRATEGIES)}" in asserts


def _singleton_advantage(name: str) -> str:
    """What upstream's estimator ``name`` computes for four prompts of one response each: zero, raises, reward."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos

    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, -1.0, 1.0, 0.5])
    given = {"token_level_rewards": rewards, "response_mask": torch.ones(4, 3), "index": np.array(list("abcd")),
             "config": AlgoConfig(), "values": torch.zeros(4, 3), "reward_baselines": torch.zeros(4),
             "old_log_probs": torch.zeros(4, 3), "sum_pi_squared": torch.zeros(4, 3), "gamma": 1.0, "lam": 1.0}
    fn = core_algos.get_adv_estimator_fn(name)
    try:
        advantages, _ = fn(**{k: v for k, v in given.items() if k in inspect.signature(fn).parameters})
    except ValueError:
        return rules_sampler.RAISES
    return rules_sampler.ZERO if torch.all(advantages == 0) else rules_sampler.NO_BASELINE


def test_the_table_of_group_relative_estimators_is_what_upstream_computes_for_a_group_of_one():
    from verl.trainer.ppo import core_algos

    assert set(core_algos.ADV_ESTIMATOR_REGISTRY) == set(rules_sampler.SINGLETON) | GROUP_FREE
    measured = {name: _singleton_advantage(name) for name in rules_sampler.SINGLETON}
    assert measured == rules_sampler.SINGLETON


def test_engine_names_are_read_from_a_modules_source_constants_included():
    assert engine_modules.registered_names("verl.cpu.checkpoint_engine") == {"gloo"}
    assert engine_modules.registered_names("no_such_module_here") is None
    tree = ast.parse('N = "x"\n@CheckpointEngineRegistry.register(N)\nclass A: ...\n'
                     '@reg.CheckpointEngineRegistry.register("y")\nclass B: ...\n@other.register("z")\nclass C: ...\n')
    assert engine_modules.names_registered_in(tree) == {"x", "y"}


def test_the_cpu_platform_names_the_module_it_declares():
    """verl/cpu/checks.py declares the engine module config_defaults fills in, in the mode it fills it."""
    from verl.cpu import checks as cpu_checks
    from verl.cpu import config_defaults

    modes, module = cpu_checks.launch_engine_module()
    for mode in ("sync", "colocate_async", "separate_async"):
        config = compose("dapo_tiny_cpu", [f"trainer.v1.trainer_mode={mode}"])
        config_defaults.apply(config)
        filled = config.actor_rollout_ref.rollout.checkpoint_engine.get("custom_backend_module")
        assert filled == (module if mode in modes else None), mode
    checks.rules()
    assert engine_modules.launch_module("cpu", "separate_async") == module
    assert engine_modules.launch_module("cpu", "sync") is None


# ------------------------------------------------------------------ the rules on the recipe's configs
@pytest.mark.parametrize("value", ["-1", "0", "abc", "1.5", "true"])
def test_a_threshold_upstream_asserts_on_is_refused(value):
    (finding,) = _found("dapo_qwen25_32b_npu", [f"{rules_sampler.THRESHOLD}={value}"], "sampler_off_policy")
    assert finding.severity == "error" and "replay_buffer.py::ReplayBuffer.__init__" in finding.message
    assert finding.message.startswith(f"{rules_sampler.THRESHOLD}=") and "an integer >= 1" in finding.accepted


def test_a_null_threshold_is_accepted_with_a_note_in_the_async_modes_only():
    key = rules_sampler.THRESHOLD
    assert _found("dapo_tiny_cpu", [f"{key}=null"], "sampler_off_policy") == []
    (note,) = _found("dapo_tiny_cpu", [f"{key}=null", "trainer.v1.trainer_mode=colocate_async"], "sampler_off_policy")
    assert note.severity == "info" and "bounds no staleness" in note.message
    assert _found("dapo_tiny_cpu", [f"{key}=1"], "sampler_off_policy") == []


def test_a_custom_sampler_owns_its_values():
    assert _found("dapo_tiny_cpu", [f"{rules_sampler.STRATEGY}=bogus", f"{rules_sampler.THRESHOLD}=-1",
                                    "trainer.v1.sampler.custom_sampler.path=x.py",
                                    "trainer.v1.sampler.custom_sampler.name=Mine"], "sampler_off_policy") == []


@pytest.mark.parametrize("config_name, n, severity, named", [
    ("dapo_qwen25_32b_npu", 1, "error", "filters nothing"),  # DAPO: grpo + dynamic sampling
    ("dapo_tiny_cpu", 1, "error", "filters nothing"),
])
def test_one_response_per_prompt_under_dapo_is_refused(config_name, n, severity, named):
    (finding,) = _found(config_name, [f"actor_rollout_ref.rollout.n={n}"], "rollout_n_group")
    assert finding.severity == severity and named in finding.message
    assert "REINFORCE without a baseline" in finding.message and "core_algos.py" in finding.message
    assert "actor_rollout_ref.rollout.n >= 2" in finding.accepted


def test_one_response_per_prompt_by_estimator():
    n1 = "actor_rollout_ref.rollout.n=1"
    (warn,) = _found("dapo_tiny_cpu", [n1, "algorithm.filter_groups.enable=false"], "rollout_n_group")
    assert warn.severity == "warn"  # plain grpo trains, on the raw reward: a note, blocking under strict
    (zero,) = _found("dapo_tiny_cpu", [n1, "algorithm.filter_groups.enable=false",
                                       "algorithm.adv_estimator=rloo_vectorized"], "rollout_n_group")
    assert zero.severity == "error" and "trains on nothing" in zero.message
    assert _found("dapo_tiny_cpu", [n1, "algorithm.adv_estimator=reinforce_plus_plus"], "rollout_n_group") == []
    assert _found("dapo_tiny_cpu", ["actor_rollout_ref.rollout.n=2"], "rollout_n_group") == []


def test_the_unknown_engine_rule_reads_the_module_in_effect():
    backend = rules_async.BACKEND
    (finding,) = _found("dapo_tiny_cpu", [f"{backend}=gloo"], "checkpoint_engine_unknown")  # sync: nobody names it
    assert finding.severity == "error" and "not in upstream's CheckpointEngineRegistry" in finding.message
    assert _found("dapo_tiny_cpu", [f"{backend}=gloo", "trainer.v1.trainer_mode=separate_async"],
                  "checkpoint_engine_unknown") == []
    assert _found("dapo_tiny_cpu", [f"{backend}=gloo", "+actor_rollout_ref.rollout.checkpoint_engine."
                                    "custom_backend_module=verl.cpu.checkpoint_engine"], "checkpoint_engine_unknown") == []
    (note,) = _found("dapo_tiny_cpu", [f"{backend}=mine", "+actor_rollout_ref.rollout.checkpoint_engine."
                                       "custom_backend_module=not_here.engine"], "checkpoint_engine_unknown")
    assert note.severity == "info" and "not checked" in note.message


# ------------------------------------------------------------------ rollout correction in bypass mode
def test_upstreams_v1_trainer_skips_the_correction_in_bypass_mode():
    """What rollout_correction_bypassed claims, read from upstream: the advantage step computes the correction
    only when not in bypass mode, and the old log-prob step returns the rollout's before any actor pass."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    advantage = inspect.getsource(PPOTrainer._compute_advantage)
    assert "not bypass_recomputing_logprobs" in advantage
    assert "compute_rollout_correction_and_add_to_batch" in advantage
    old = inspect.getsource(PPOTrainer._compute_old_log_prob)
    assert old.index('data.pop("rollout_log_probs")') < old.index("compute_log_prob(batch)")


@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_correction_asked_for_in_bypass_mode_warns_naming_both_keys(mode):
    c = "algorithm.rollout_correction"
    asked = [f"trainer.v1.trainer_mode={mode}", f"{c}.rollout_is=token", f"{c}.rollout_is_threshold=2.0"]
    (hit,) = _found("dapo_tiny_cpu", [*asked, f"{c}.bypass_mode=true"], "rollout_correction_bypassed")
    assert hit.severity == rules_sampler.WARN
    assert {f"{c}.rollout_is", f"{c}.bypass_mode"} <= set(hit.keys) and "trainer_base.py" in hit.message
    assert not _found("dapo_tiny_cpu", [*asked, f"{c}.bypass_mode=false"], "rollout_correction_bypassed")
    assert not _found("dapo_tiny_cpu", [f"trainer.v1.trainer_mode={mode}", f"{c}.bypass_mode=true"],
                      "rollout_correction_bypassed")
