"""Warm Ray workers (verl_ascend/run/warm_workers.py): the plan, where it must not apply, and a real cluster.

The plan is checked against upstream's own ``get_ppo_ray_runtime_env``: the workers must see exactly
the environment ``run_ppo`` would have given them through ``runtime_env``. The e2e test starts a real
local Ray cluster through :func:`warm_workers.start` and checks that actors created afterwards -- also
from inside another actor, as upstream's TaskRunner creates them -- land in the workers Ray started
with the node, already holding verl, and see the run's environment variables.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from recipe.dapo_ascend.options import DapoAscendOptions
from verl_ascend.run import warm_workers

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "dapo_ascend" / "config")


def _config(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="dapo_demo_cpu", overrides=["tiny_dir=/nonexistent/tiny", *overrides])


@pytest.fixture(autouse=True)
def _no_inherited_env(monkeypatch):
    # get_ppo_ray_runtime_env leaves out variables the launching shell already sets.
    for key in ("TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "VLLM_LOGGING_LEVEL", "RAY_ADDRESS"):
        monkeypatch.delenv(key, raising=False)


def test_the_demo_asks_for_seven_warm_workers_and_the_tests_config_for_none():
    from hydra import compose, initialize_config_dir

    assert DapoAscendOptions.from_config(_config()).warm_workers == 7
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        tests_config = compose(config_name="dapo_tiny_cpu", overrides=["tiny_dir=/nonexistent/tiny"])
    assert DapoAscendOptions.from_config(tests_config).warm_workers == 0  # dapo_base's default


def test_plan_gives_the_workers_exactly_run_ppos_environment_and_preloads_verl():
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from verl_ascend.device import device_hooks

    config = _config("+ray_kwargs.ray_init.runtime_env.env_vars.VERL_ASCEND_WARM_PROBE=on")
    device_hooks("cpu").prepare_config(config)  # as the launch does before warm_workers.start: the CPU platform sizes num_gpus
    plan = warm_workers.plan(config, 7)
    assert plan.skipped is None
    upstream = get_ppo_ray_runtime_env(config)["env_vars"]
    for key, value in upstream.items():
        assert plan.env_vars[key] == str(value), key
    assert plan.env_vars["TOKENIZERS_PARALLELISM"] == "true"  # upstream's default
    # run_ppo adds the TransferQueue switch when transfer_queue.enable is on (off in the demo).
    assert "TRANSFER_QUEUE_ENABLE" not in plan.env_vars
    tq_on = warm_workers.plan(_config("transfer_queue.enable=true"), 7)
    assert tq_on.env_vars["TRANSFER_QUEUE_ENABLE"] == "1"
    assert plan.env_vars["VERL_ASCEND_WARM_PROBE"] == "on"  # the user's runtime_env
    kwargs = plan.init_kwargs
    assert "runtime_env" not in kwargs  # idle workers only serve actors without one
    assert kwargs["num_cpus"] == config.ray_kwargs.ray_init.num_cpus
    assert kwargs["num_gpus"] == 1  # one logical slot per training rank (sync: no rollout pool)
    assert kwargs["_system_config"] == {"preload_python_modules": ["verl"], "worker_maximum_startup_concurrency": 7}


def test_a_users_own_ray_system_config_is_kept():
    config = _config("+ray_kwargs.ray_init._system_config.worker_maximum_startup_concurrency=3",
                     "+ray_kwargs.ray_init._system_config.object_spilling_threshold=0.9")
    system = warm_workers.plan(config, 7).init_kwargs["_system_config"]
    assert system == {"worker_maximum_startup_concurrency": 3, "object_spilling_threshold": 0.9,
                      "preload_python_modules": ["verl"]}


@pytest.mark.parametrize(
    "overrides, count, reason",
    [
        ((), 0, "warm_workers=0"),
        (("+ray_kwargs.ray_init.address=10.0.0.1:6379",), 7, "existing Ray cluster at 10.0.0.1:6379"),
        (("trainer.device=npu",), 7, "device=npu"),
        (("actor_rollout_ref.rollout.full_determinism=true",), 7, "actor_rollout_ref.rollout.full_determinism"),
        (("trainer.logger=[console,rl_insight]",), 7, "rl_insight"),
        (("+ray_kwargs.ray_init.runtime_env.working_dir=/tmp/code",), 7, "['working_dir']"),
    ],
)
def test_plan_steps_aside_where_only_upstreams_ray_init_is_right(overrides, count, reason):
    plan = warm_workers.plan(_config(*overrides), count)
    assert plan.skipped is not None and reason in plan.skipped
    assert plan.init_kwargs == {} and plan.env_vars == {}


def test_start_leaves_ray_to_upstream_when_skipped(capsys):
    import ray

    assert not ray.is_initialized()
    plan = warm_workers.start(_config("+ray_kwargs.ray_init.address=10.0.0.1:6379"), 7)
    assert plan.skipped and not ray.is_initialized()
    assert "warm_workers: not applied (the run joins the existing Ray cluster" in capsys.readouterr().out


@pytest.mark.parametrize("value", [-1, "many", True, 2.5, 65, 100000])
def test_a_bad_count_is_refused_naming_the_key(value):
    config = _config()
    with open_dict(config):
        config.trainer.v1.dapo_ascend.warm_workers = value
    with pytest.raises(ValueError, match=r"trainer\.v1\.dapo_ascend\.warm_workers=.*integer from 0 \(off\) to 64"):
        DapoAscendOptions.from_config(config)


def test_the_preflight_table_refuses_a_bad_count_before_ray():
    from recipe.dapo_ascend.config_schema import problems

    errors = [e for e in problems(_config("trainer.v1.dapo_ascend.warm_workers=-2")) if "warm_workers" in e]
    assert errors == ["trainer.v1.dapo_ascend.warm_workers=-2: accepted: an integer from 0 (off) to 64"]


@pytest.mark.e2e
def test_actors_land_in_the_workers_ray_started_with_verl_already_imported():
    import ray

    from tests.launch import require_e2e

    require_e2e("a Ray cluster")
    config = _config("ray_kwargs.ray_init.num_cpus=4",
                     "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_ASCEND_WARM_PROBE=seen")
    plan = warm_workers.start(config, 3)
    try:
        assert plan.skipped is None and ray.is_initialized()
        started = time.time()

        @ray.remote(num_cpus=0)
        class Probe:
            def __init__(self):
                import sys

                self.had_verl = "verl" in sys.modules  # before this actor imported anything itself

            def report(self):
                import psutil

                return {"pid": os.getpid(), "had_verl": self.had_verl,
                        "created": psutil.Process().create_time(),
                        "probe": os.environ.get("VERL_ASCEND_WARM_PROBE")}

        @ray.remote(num_cpus=0)
        class Parent:  # upstream's TaskRunner creates the other actors from inside an actor
            def child_report(self):
                child = Probe.remote()
                return ray.get(child.report.remote())

        parent = Parent.remote()
        reports = [ray.get(Probe.remote().report.remote()), ray.get(parent.child_report.remote())]
        for report in reports:
            assert report["had_verl"], report
            assert report["probe"] == "seen", report
            assert report["created"] < started, report  # a worker started with the node, not for this actor
        assert len({r["pid"] for r in reports}) == 2
    finally:
        ray.shutdown()
        for key in plan.env_vars:
            os.environ.pop(key, None)
