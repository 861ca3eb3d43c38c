"""The Ascend platform's Ray resources and the env profile, observed inside real Ray workers.

A local 2-CPU Ray cluster with 2 logical ``NPU`` resources is started from the runtime_env
that ``apply_to_config`` produced (merged over upstream's default runtime_env as
``run_ppo`` does). Upstream's ``RayResourcePool``/``RayWorkerGroup`` place two training
workers; one of them launches a rollout-server actor the way upstream's vLLM replica does
(``runtime_env={"env_vars": platform.rollout_env_vars()}``), which spawns a child process
the way vLLM spawns its workers. Each process reports its own view.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.launch import start_local_ray
from verl.ascend import emulator
from recipe.dapo_ascend.main_dapo import RECIPE
from verl.ascend.env.profile import PROFILE_ENV, apply_to_config, is_arm_cpu

compose_config = RECIPE.compose

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)

HERE = Path(__file__).resolve().parent
OVERRIDES = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.enforce_eager=False",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=8",
    "+ascend.env.mc2=false",
    "+ascend.fused_ops.swiglu=false",
    "trainer.device=npu",
]
NAMES = [
    "TASK_QUEUE_ENABLE",
    "CPU_AFFINITY_CONF",
    "HCCL_OP_EXPANSION_MODE",
    "VERL_PLATFORM",
    "VERL_ASCEND_FUSED_SWIGLU",
    "VERL_ASCEND_NPU_EMULATOR",
    "ASCEND_RT_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    PROFILE_ENV,
]


@pytest.fixture(scope="module")
def cluster():
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    saved = os.environ.get(PROFILE_ENV)
    config = compose_config("dapo_base", OVERRIDES)
    environ = {k: v for k, v in os.environ.items() if k not in NAMES[:5]}
    environ["VERL_ASCEND_NPU_EMULATOR"] = os.environ.get("VERL_ASCEND_NPU_EMULATOR", "")
    profile = apply_to_config(config, environ=environ)
    runtime_env = OmegaConf.to_container(
        OmegaConf.merge(get_ppo_ray_runtime_env(config), config.ray_kwargs.ray_init.runtime_env)
    )
    runtime_env["env_vars"]["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    start_local_ray(num_cpus=2, resources={"NPU": 2}, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)
    try:
        yield profile
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop(PROFILE_ENV, None)
        else:
            os.environ[PROFILE_ENV] = saved


@pytest.fixture(scope="module")
def worker_group(cluster):
    import ray
    import ray_probes
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool([2], use_gpu=True, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(ray_probes.ProbeWorker)), device_name="npu")
    return group


def test_training_workers_run_the_ascend_platform_on_npu_resources(worker_group, cluster):
    reports = worker_group.probe(NAMES)
    assert len(reports) == 2 and len({r["pid"] for r in reports}) == 2
    for r in reports:
        assert r["platform"] == "AscendPlatform" and r["vendor"] == "huawei" and r["resource"] == "NPU"
        assert len(r["npu_ids"]) == 1 and r["env"]["ASCEND_RT_VISIBLE_DEVICES"] == r["npu_ids"][0]
        assert r["device_count"] == 1  # the emulated torch.npu sees exactly the NPU Ray gave it
        assert r["emulated"] == emulator.active()  # emulated here <=> emulated in the workers
        assert r["device_name"] == ("cpu" if r["emulated"] else "npu")
    assert sorted(r["npu_ids"][0] for r in reports) == ["0", "1"]


def test_train_role_of_the_profile_reaches_training_workers(worker_group, cluster):
    expected = cluster.job_env_vars()
    for r in worker_group.probe(NAMES):
        env = r["env"]
        assert env["TASK_QUEUE_ENABLE"] == expected["TASK_QUEUE_ENABLE"] == "1"  # graph-mode rollout
        assert env["CPU_AFFINITY_CONF"] == "1" and env["VERL_PLATFORM"] == "huawei"
        assert env["VERL_ASCEND_FUSED_SWIGLU"] == "0"
        assert env["HCCL_OP_EXPANSION_MODE"] is None  # AIV is rollout-only
        assert env[PROFILE_ENV] is not None


def test_fused_ops_are_patched_inside_the_workers_per_the_config(worker_group):
    for r in worker_group.build_model_hook("qwen2"):
        kernels = sorted(a.rsplit(" ", 1)[-1] for a in r["active"])
        assert kernels == ["torch_npu.npu_rms_norm", "torch_npu.npu_rotary_mul"], r["summary"]
        assert any("Qwen2MLP.forward" in o for o in r["off"])  # ascend.fused_ops.swiglu=false


def test_rollout_role_reaches_the_server_actor_and_the_processes_it_spawns(worker_group, cluster):
    rollout = cluster.rollout_env_vars()
    (result, *_) = worker_group.launch_rollout_server(NAMES)
    server, spawned = result["server"], result["spawned"]
    assert spawned["pid"] != server["pid"]
    for env in (server["env"], spawned["env"]):
        assert env["HCCL_OP_EXPANSION_MODE"] == rollout["HCCL_OP_EXPANSION_MODE"] == "AIV"
        # auto: this host's CPU decides (vllm-ascend binds its workers itself on ARM only)
        assert env["CPU_AFFINITY_CONF"] == rollout["CPU_AFFINITY_CONF"] == ("0" if is_arm_cpu(platform.machine()) else "1")
        assert "VLLM_USE_V1" not in env
        assert env["TASK_QUEUE_ENABLE"] == "1"
        assert env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
