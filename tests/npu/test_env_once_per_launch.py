"""One launch evaluates the Ascend env profile once (issue 26: "evaluated once per run or dry run").

The real launch path in this process: ``verl_ascend.launch.launch`` on the tiny config with
``trainer.device=npu`` (the NPU emulator), through ``prepare`` (the checks, whose env rule evaluates
the profile, then the NPU platform's ``deliver_config``: ``apply_to_config``) and ``start`` up to
upstream's ``run_ppo``, which is stood in for: it records the job's Ray env and starts nothing.
"""

from __future__ import annotations

import json

from recipe.dapo_ascend.main_dapo import RECIPE
from verl.ascend.env import profile as env_profile
from verl.ascend.env.profile import PROFILE_ENV, RAY_ENV_KEY
from verl_ascend.launch import launch
from verl_ascend.run import lifetime

compose = RECIPE.compose


def test_a_launch_evaluates_the_profile_once_and_delivers_it(tiny_dir, tmp_path, monkeypatch, evaluations):
    import verl.trainer.main_ppo as main_ppo
    from omegaconf import OmegaConf

    monkeypatch.setenv("VERL_ASCEND_TINY_DIR", str(tiny_dir))
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(tmp_path))
    monkeypatch.delenv("DRY_RUN", raising=False)
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    config = compose("dapo_tiny_cpu", ["trainer.device=npu", "trainer.total_training_steps=1", "trainer.logger=[console]"])
    delivered = {}

    def run_ppo(config, task_runner_class=None):  # upstream's trainer: here only what it would be handed
        delivered.update(OmegaConf.to_container(OmegaConf.select(config, RAY_ENV_KEY), resolve=True))

    monkeypatch.setattr(main_ppo, "run_ppo", run_ppo)
    monkeypatch.setattr(lifetime.Guardian, "start", classmethod(lambda cls, *a, **k: None))
    assert launch(RECIPE, config) == 0
    assert delivered["TASK_QUEUE_ENABLE"] == "1"  # the profile reached the job's Ray env
    assert json.loads(delivered[PROFILE_ENV])
    assert len(evaluations) == 1, f"the profile was evaluated {len(evaluations)} times in one launch"


def test_variables_outside_what_the_evaluation_reads_change_nothing(evaluations):
    """The memo's key leaves out every variable but the table's, VLLM_* and the stack targets: prove
    that any other one, in the environment or the job's Ray env, leaves the profile as it was."""
    from omegaconf import OmegaConf, open_dict

    config = compose("dapo_qwen25_32b_npu", [])
    driver_own = {"VERL_USE_EXTERNAL_MODULES": "recipe.dapo_ascend.register", "VERL_ASCEND_RUN_DIR": "/x",
                  "VERL_ASCEND_METRICS_APPEND": "1", "PATH": "/bin", "HCCL_SOMETHING_NEW": "1"}
    bare = env_profile.evaluate_env_profile(config, {})
    with open_dict(config):
        for name, value in driver_own.items():
            OmegaConf.update(config, f"{RAY_ENV_KEY}.{name}", value, force_add=True)
    other = env_profile.evaluate_env_profile(config, driver_own)
    assert other[0].as_dict() == bare[0].as_dict() and other[1] == bare[1]
    assert not any(env_profile._reads_variable(name) for name in driver_own)
    # ... while one the evaluation reads is a new state: evaluated again, with its effect.
    with env_profile.evaluated_once():
        env_profile.evaluate_env_profile(config, driver_own)
        env_profile.evaluate_env_profile(config, {**driver_own, "PATH": "/usr/bin"})
        assert len(evaluations) == 3
        changed = env_profile.evaluate_env_profile(config, {**driver_own, "TASK_QUEUE_ENABLE": "0"})[0]
        assert len(evaluations) == 4 and changed.env("train")["TASK_QUEUE_ENABLE"] == "0"
        vllm = env_profile.evaluate_env_profile(config, {**driver_own, "VLLM_SOME_SWITCH": "1"})
        assert len(evaluations) == 5 and vllm[0].as_dict() != bare[0].as_dict()
