"""Upstream's own entry point on a CPU-only machine, with user-level overrides only.

``python -m verl.trainer.main_ppo`` must train (model, data, reward function, rollout engine,
batch sizes and steps are all the user says), and a setting that cannot work on a CPU must stop
the run at once with the key named, not hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.launch import require_e2e

STEPS = 2


def user_overrides(tiny_dir) -> list[str]:
    """What a user writes for custom data on any machine: nothing CPU-specific."""
    return [
        f"data.train_files={tiny_dir}/data/train.parquet",
        f"data.val_files={tiny_dir}/data/val.parquet",
        "data.max_prompt_length=8",
        "data.max_response_length=8",
        "data.train_batch_size=4",
        f"actor_rollout_ref.model.path={tiny_dir}/model",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "algorithm.adv_estimator=grpo",
        "reward.custom_reward_function.path=pkg://recipe.dapo_ascend.tiny.task",
        "trainer.n_gpus_per_node=1",
        f"trainer.total_training_steps={STEPS}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[file]",
    ]


def main_ppo(overrides: list[str], metrics, timeout: int):
    require_e2e("upstream's main_ppo")
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics), "PYTHONUNBUFFERED": "1"}
    env.pop("OMP_NUM_THREADS", None)  # the CPU platform's default is what is under test
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="module")
def two_steps(tiny_dir, tmp_path_factory):
    metrics = tmp_path_factory.mktemp("main_ppo") / "metrics.jsonl"
    result = main_ppo(user_overrides(tiny_dir), metrics, timeout=1200)
    assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-4000:])
    return result, [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.mark.e2e
def test_upstream_main_ppo_trains_two_steps_on_cpu(two_steps):
    _, records = two_steps
    steps = [r for r in records if "timing_s/step" in r["data"]]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    for record in steps:
        data = record["data"]
        assert data["timing_s/update_actor"] > 0 and data["perf/total_num_tokens"] > 0  # the actor trained
        assert 0.0 <= data["critic/score/mean"] <= 1.0  # the custom reward function scored
        assert 1 <= data["response_length/max"] <= 8
        # The hf server's log-probs agree with the actor's recomputation: sdpa, fp32 on both sides.
        assert data["training/rollout_probs_diff_max"] < 1e-2


@pytest.mark.e2e
def test_cpu_platform_says_what_it_supplied(two_steps):
    result, _ = two_steps
    log = result.stdout + result.stderr
    for line in (
        "trainer.device: cuda -> cpu",
        "actor_rollout_ref.model.override_config.attn_implementation: (upstream default flash_attention_2) -> sdpa",
        "actor_rollout_ref.actor.strategy: fsdp -> fsdp2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size: 2 -> 1",
        "ray_kwargs.ray_init.num_gpus: unset -> 1",
        "ray_kwargs.ray_init.num_cpus: unset -> 13",
    ):
        assert f"[verl.cpu] {line}" in log


@pytest.mark.parametrize(
    "override, named",
    [
        ("ray_kwargs.ray_init.num_cpus=2", "ray_kwargs.ray_init.num_cpus=2 is too small"),
        ("+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
         "actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2 needs a CUDA GPU"),
    ],
)
@pytest.mark.e2e
def test_a_setting_that_cannot_work_fails_at_once(tiny_dir, tmp_path, override, named):
    """Before Ray starts: exit 2 with the key named (num_cpus=2 used to hang with no error)."""
    result = main_ppo([*user_overrides(tiny_dir), override], tmp_path / "metrics.jsonl", timeout=300)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert f"[verl.cpu] error: {named}" in result.stderr
    assert "ray init kwargs" not in result.stdout  # failed before upstream started Ray
    assert not (tmp_path / "metrics.jsonl").exists()


def test_defaults_fill_only_what_is_unset():
    """An explicit user choice that works on a CPU is kept; only upstream's GPU defaults change."""
    from hydra import compose, initialize_config_module

    from verl.cpu import config_defaults

    with initialize_config_module("verl.trainer.config", version_base=None):
        config = compose(
            "ppo_trainer",
            overrides=[
                "+actor_rollout_ref.model.override_config.attn_implementation=eager",
                "ray_kwargs.ray_init.num_cpus=40",
                "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
                "trainer.n_gpus_per_node=2",
            ],
        )
    config_defaults.apply(config)
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "eager"
    assert config.ray_kwargs.ray_init.num_cpus == 40
    assert config.ray_kwargs.ray_init.num_gpus == 2
    assert config.actor_rollout_ref.ref.strategy == "fsdp2"  # follows the actor's by interpolation
    # 3 slots x 2 ranks + TransferQueue controller + 2 storage units + 1 to schedule with.
    assert config_defaults.cpu_slots_needed(config, ranks=2) == 10


def test_worker_thread_counts_filled_unless_set(monkeypatch):
    """One torch thread per worker and per TransferQueue put/get, unless the driver or config says otherwise."""
    from hydra import compose, initialize_config_module

    from verl.cpu import config_defaults

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("TQ_NUM_THREADS", raising=False)
    with initialize_config_module("verl.trainer.config", version_base=None):
        config = compose("ppo_trainer", overrides=["+ray_kwargs.ray_init.runtime_env.env_vars.TQ_NUM_THREADS=4"])
    changes = config_defaults.apply(config)
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.OMP_NUM_THREADS == "1" and str(env_vars.TQ_NUM_THREADS) == "4"
    assert any("OMP_NUM_THREADS: unset -> 1" in c for c in changes)
    assert not any("TQ_NUM_THREADS" in c for c in changes)


def _upstream_config(*overrides: str):
    from hydra import compose, initialize_config_module

    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose("ppo_trainer", overrides=list(overrides))


def test_separate_async_gets_the_gloo_engine_and_a_rollout_pool():
    """separate_async on a CPU: upstream refuses 'naive' and asserts rollout.nnodes > 0 inside Ray."""
    from verl.cpu import config_defaults

    config = _upstream_config("trainer.v1.trainer_mode=separate_async", "trainer.n_gpus_per_node=1")
    changes = config_defaults.apply(config)
    engine = config.actor_rollout_ref.rollout.checkpoint_engine
    assert (engine.backend, engine.custom_backend_module) == ("gloo", "verl.cpu.checkpoint_engine")
    assert config.actor_rollout_ref.rollout.nnodes == 1 and config.actor_rollout_ref.rollout.n_gpus_per_node == 1
    assert config.ray_kwargs.ray_init.num_gpus == 2  # the training rank and the rollout pool's slot
    assert config.ray_kwargs.ray_init.num_cpus >= config_defaults.cpu_slots_needed(config, ranks=2)
    assert "actor_rollout_ref.rollout.checkpoint_engine.backend: naive -> gloo (separate trainer and rollout " \
        "processes)" in changes


def test_other_modes_keep_the_naive_engine():
    from verl.cpu import config_defaults

    for mode in ("sync", "colocate_async"):
        config = _upstream_config(f"trainer.v1.trainer_mode={mode}", "trainer.n_gpus_per_node=1")
        config_defaults.apply(config)
        assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "naive"
        assert config.ray_kwargs.ray_init.num_gpus == 1


@pytest.mark.parametrize("override, named", [
    ("+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.gloo.timeout_sec=5",
     r"engine_kwargs.gloo.timeout_sec: unknown key; accepted keys: \['timeout_s'\]"),
    ("+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.gloo.timeout_s=-1",
     r"engine_kwargs.gloo.timeout_s=-1: accepted: a number of seconds > 0"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
     r"checkpoint_engine.backend=nccl moves weights between devices; on a CPU use gloo"),
])
def test_separate_async_engine_settings_that_cannot_work_are_refused_before_ray(override, named):
    from verl.cpu import config_defaults

    config = _upstream_config("trainer.v1.trainer_mode=separate_async", override)
    with pytest.raises(config_defaults.CPUConfigError, match=named):
        config_defaults.apply(config)


@pytest.mark.e2e
def test_main_ppo_without_a_rollout_engine_is_refused_before_ray(tiny_dir, tmp_path):
    """Upstream's `???` for actor_rollout_ref.rollout.name used to start Ray, TransferQueue and the worker
    group and then die in a traceback from a Ray actor; the CPU platform's driver hook names it first."""
    overrides = [o for o in user_overrides(tiny_dir) if not o.startswith("actor_rollout_ref.rollout.name=")]
    result = main_ppo(overrides, tmp_path / "metrics.jsonl", timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-4000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("[verl.cpu] error:")]
    assert "actor_rollout_ref.rollout.name is not set" in line and "'hf'" in line and "'vllm'" in line, line
    for started in ("Started a local Ray instance", "TransferQueue", "Traceback"):
        assert started not in output, output[-4000:]
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.e2e
@pytest.mark.slow  # the recipe's separate_async runs the same gloo engine in CI (tests/recipe/test_trainer_modes_e2e.py)
def test_upstream_separate_async_trains_on_cpu_through_the_gloo_engine(tiny_dir, tmp_path):
    """Upstream's own separate_async trainer, nothing CPU-specific added: the CPU platform supplies the gloo
    engine and the rollout pool, and every parameter sync moves the whole model between the two pools."""
    metrics = tmp_path / "metrics.jsonl"
    overrides = [*user_overrides(tiny_dir), "trainer.v1.trainer_mode=separate_async",
                 "trainer.v1.separate_async.parameter_sync_step=1"]  # train_batch_size == 1 x ppo_mini_batch_size
    result = main_ppo(overrides, metrics, timeout=1200)
    assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-4000:])
    assert "checkpoint_engine.backend: naive -> gloo" in result.stdout + result.stderr
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    synced = [r["data"] for r in rows if "weight_sync/gloo_tensors" in r.get("data", {})]
    trained = [r for r in rows if "actor/pg_loss" in r.get("data", {})]
    assert len(trained) == STEPS and len(synced) >= STEPS
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir / "model")
    params = model.state_dict()  # the tied lm_head.weight included: upstream sends every state-dict entry
    for data in synced:
        assert data["weight_sync/gloo_tensors"] == len(params)  # every tensor of the model, once
        assert data["weight_sync/gloo_megabytes"] * 2**20 == sum(p.numel() * p.element_size() for p in params.values())
    staleness = [r["data"]["training/off_policy/trajectory_staleness/max"] for r in trained]
    assert max(staleness) <= 1  # parameter_sync_step=1: samples at most one weight version old
