"""The recipe's trainer in each of upstream's trainer modes (``recipe/dapo_ascend/modes.py``, ``trainer.py``).

Without Ray: upstream's own registry, bound by the recipe's task runner, resolves each mode to the
recipe's hooks in front of upstream's class for it; the hooks keep what the async modes need (ReplayBufferAsync, the partial-rollout client, the poll
interval); the entry point refuses, before Ray and naming the key, what cannot run in a mode; and the CPU
platform fills in the rollout pool and the weight-sync engine of separate_async at launch.
The runs themselves: ``tests/recipe/test_trainer_modes_e2e.py``.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from recipe.dapo_ascend import modes
from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend import trainer_mode

compose = RECIPE.compose

UPSTREAM = {
    "sync": "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync",
    "colocate_async": "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync",
    "separate_async": "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync",
}


def _upstream_class(spec: str):
    import importlib

    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("mode", trainer_mode.MODES)
def test_the_recipes_runner_resolves_each_mode_to_the_recipes_hooks_in_front_of_upstreams_class(mode):
    from verl.trainer.ppo.v1 import get_trainer_cls

    import recipe.dapo_ascend.trainer as trainer

    with trainer_mode.recipe_trainers(modes.REGISTRY):  # what the recipe's task runner binds around run()
        cls = get_trainer_cls(mode)
    mro = cls.__mro__
    assert mro[1] is trainer.DAPOAscendHooks and mro[2] is _upstream_class(UPSTREAM[mode]), mro
    assert cls.MODE == mode and get_trainer_cls(modes.REGISTRY[mode]) is cls
    assert get_trainer_cls(mode) is _upstream_class(UPSTREAM[mode])  # outside it: upstream's own


def test_upstream_reads_the_users_mode_and_a_registry_name_is_refused_by_the_hooks(monkeypatch):
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    import recipe.dapo_ascend.trainer as trainer

    seen = {}
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: seen.setdefault("mode", config.trainer.v1.trainer_mode))
    monkeypatch.setattr(trainer, "RunJournal", lambda config: None)
    config = compose("dapo_demo_cpu", ["trainer.v1.trainer_mode=colocate_async"])
    trainer.DAPOAscendColocateAsync(config)
    assert seen["mode"] == "colocate_async" == config.trainer.v1.trainer_mode
    # upstream's main_ppo with the recipe's module and a registry name: refused, not run as another mode
    config.trainer.v1.trainer_mode = modes.REGISTRY["colocate_async"]
    with pytest.raises(ValueError, match="'dapo_ascend.colocate_async' reached the recipe's DAPOAscendColocateAsync"):
        trainer.DAPOAscendColocateAsync(config)


def _bare(cls, config):
    """An instance of the recipe's class with the components its replay-buffer hook uses, no Ray."""
    from recipe.dapo_ascend.options import DapoAscendOptions
    from recipe.dapo_ascend.rollout_tail.component import RolloutTail
    from verl_ascend.run.watchdog import RolloutWatchdog

    obj = cls.__new__(cls)
    obj.config = config
    obj.options = DapoAscendOptions.from_config(config)
    obj.rollout_tail = RolloutTail(config, lambda: [])
    obj.rollout_watchdog = RolloutWatchdog.from_config(config, lambda: [])
    return obj


@pytest.mark.parametrize("mode,cls_name", [("colocate_async", "DAPOAscendColocateAsync"),
                                           ("separate_async", "DAPOAscendSeparateAsync")])
def test_async_modes_keep_upstreams_async_buffer_with_the_recipes_poll_interval_and_watchdog(mode, cls_name, monkeypatch):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    import recipe.dapo_ascend.trainer as trainer

    built = ReplayBufferAsync.__new__(ReplayBufferAsync)
    built.poll_interval = 2.0  # upstream's hard-coded value
    monkeypatch.setattr(PPOTrainer, "_build_replay_buffer", lambda self: built)
    config = compose("dapo_demo_cpu", [f"trainer.v1.trainer_mode={mode}"])
    buffer = _bare(getattr(trainer, cls_name), config)._build_replay_buffer()
    assert type(buffer) is ReplayBufferAsync  # not the tail's synchronous TailMeter
    assert buffer.poll_interval == 0.02  # the demo's trainer.v1.dapo_ascend.poll_interval_s
    assert buffer.sample.__name__ == "watched_sample"  # the rollout watchdog wraps it

    # sync: the tail's meter (a synchronous ReplayBuffer subclass) adopts upstream's buffer
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from recipe.dapo_ascend.rollout_tail.sampler import TailMeter

    sync_built = ReplayBuffer.__new__(ReplayBuffer)
    sync_built.poll_interval = 2.0
    monkeypatch.setattr(PPOTrainer, "_build_replay_buffer", lambda self: sync_built)
    sync = _bare(trainer.DAPOAscendTrainer, compose("dapo_demo_cpu"))._build_replay_buffer()
    assert type(sync) is TailMeter and sync.poll_interval == 0.02


class _Manager:
    """An LLMServerManager's addresses, handles and client factory (what get_llm_client reads)."""

    def __init__(self, n):
        self.server_addresses = [f"127.0.0.1:80{i}" for i in range(n)]
        self.server_handles = [object() for _ in range(n)]

    def get_client(self, client_cls=None, **kwargs):
        return client_cls, kwargs


@pytest.mark.parametrize("mode,cls_name,pool", [("colocate_async", "DAPOAscendColocateAsync", "llm_server_manager"),
                                                ("separate_async", "DAPOAscendSeparateAsync",
                                                 "standalone_server_manager")])
def test_async_modes_keep_upstreams_partial_rollout_client_and_skip_the_balancer_for_one_server(mode, cls_name, pool):
    """Upstream's abort/resume client (FullyAsyncLLMServerClient) in both async modes; with one server in the
    mode's rollout pool the recipe's subclass of it skips the balancer, otherwise upstream's class as is."""
    from verl.trainer.config import HybridRolloutSwitchConfig
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

    import recipe.dapo_ascend.trainer as trainer
    from recipe.dapo_ascend.sole_server import SoleFullyAsyncServerClient

    def client(n_servers, enable_switch=False):
        obj = _bare(getattr(trainer, cls_name), compose("dapo_demo_cpu", [f"trainer.v1.trainer_mode={mode}"]))
        obj.llm_server_manager = _Manager(1)  # separate_async: the trainer's own (hybrid) replicas
        setattr(obj, pool, _Manager(n_servers))
        obj.hybrid_rollout_config = HybridRolloutSwitchConfig(enable_switch=enable_switch)
        return obj.get_llm_client(), getattr(obj, pool)

    (cls, kwargs), manager = client(1)
    assert cls is SoleFullyAsyncServerClient and issubclass(cls, FullyAsyncLLMServerClient)
    assert kwargs["server"] == (manager.server_addresses[0], manager.server_handles[0])  # the mode's pool
    assert client(2)[0] == (FullyAsyncLLMServerClient, {})
    if mode == "separate_async":  # the trainer's replicas join the balancer between steps: upstream's routing
        assert client(1, enable_switch=True)[0] == (FullyAsyncLLMServerClient, {})


# -- refused before Ray, naming the key ---------------------------------------------------------------
def test_the_recipes_internal_registry_name_is_refused_naming_upstreams_modes(entry, tmp_path):
    result = entry("trainer.v1.trainer_mode=dapo_ascend")
    text = result.stdout + result.stderr
    assert result.returncode == 2, text[-2000:]
    assert "trainer_mode_supported" in text and "'dapo_ascend' is the recipe's internal registry name" in text
    assert "accepted: sync | colocate_async | separate_async" in text
    assert entry.started == [] and not (tmp_path / "out").exists()


def test_an_unknown_mode_is_refused_before_ray(entry):
    result = entry("trainer.v1.trainer_mode=fully_async")
    assert result.returncode == 2 and "trainer.v1.trainer_mode=fully_async" in result.stdout + result.stderr
    assert entry.started == []


@pytest.mark.parametrize("mode", trainer_mode.ASYNC_MODES)
def test_the_rollout_tail_is_refused_in_the_async_modes(entry, mode):
    result = entry(f"trainer.v1.trainer_mode={mode}", "trainer.v1.dapo_ascend.rollout_tail.enable=true",
                   "trainer.v1.separate_async.parameter_sync_step=1")
    text = result.stdout + result.stderr
    assert result.returncode == 2, text[-2000:]
    assert "rollout_tail_ignored" in text and f"trainer.v1.trainer_mode={mode!r}" in text
    assert entry.started == []


def test_a_device_engine_on_cpu_is_refused_by_the_launch(entry):
    result = entry("trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl")
    text = result.stdout + result.stderr
    assert result.returncode == 2, text[-2000:]
    assert "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl moves weights between devices" in text
    assert entry.started == []


# -- what the launch fills in, per mode ----------------------------------------------------------------
@pytest.mark.parametrize("config_name", ["dapo_demo_cpu", "dapo_tiny_cpu"])
@pytest.mark.parametrize("mode", trainer_mode.MODES)
def test_each_mode_starts_with_nothing_added_and_gets_what_it_needs(entry, config_name, mode):
    result = entry(f"trainer.v1.trainer_mode={mode}", config_name=config_name)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (config,) = entry.started
    rollout, ray_init = config.actor_rollout_ref.rollout, config.ray_kwargs.ray_init
    assert config.trainer.v1.trainer_mode == mode  # never renamed: the runner resolves it in run()
    if mode == "separate_async":
        assert rollout.checkpoint_engine.backend == "gloo"
        assert rollout.checkpoint_engine.custom_backend_module == "verl.cpu.checkpoint_engine"
        assert rollout.nnodes * rollout.n_gpus_per_node == 1 and ray_init.num_gpus == 2
        train, mini = config.data.train_batch_size, config.actor_rollout_ref.actor.ppo_mini_batch_size
        assert config.trainer.v1.separate_async.parameter_sync_step * mini == train
    else:
        assert rollout.checkpoint_engine.backend == "naive" and ray_init.num_gpus == 1
    entry.started.clear()
    entry.release()


def test_progress_line_shows_staleness_and_weight_sync_in_the_async_modes():
    from verl_ascend.run.progress import format_step

    base = {"critic/score/mean": 0.5, "reward_extra/acc/mean": 0.5, "timing_s/step": 2.0, "timing_s/gen": 1.0,
            "timing_s/update_weights": 0.25}
    assert "stale" not in format_step({"step": 1, "data": base}) and "weight sync" not in format_step({"step": 1, "data": base})
    line = format_step({"step": 2, "data": {**base, "training/off_policy/trajectory_staleness/mean": 0.875,
                                             "training/off_policy/trajectory_staleness/max": 1}})
    assert "stale 0.88 (max 1) | weight sync 0.25s" in line


def test_separate_async_rollout_pool_traces_are_checked_once_upstream_stops_them(monkeypatch):
    """separate_async stops its rollout servers' profilers in on_step_end, after the step's own check:
    the hook checks their traces right after upstream's ``_stop_rollout_profiling``."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    import recipe.dapo_ascend.trainer as trainer

    calls = []
    monkeypatch.setattr(PPOTrainer, "_stop_rollout_profiling", lambda self: calls.append("upstream"))

    class Check:
        def after_rollout_stop(self, step):
            calls.append(("checked", step))
            return []

    obj = trainer.DAPOAscendSeparateAsync.__new__(trainer.DAPOAscendSeparateAsync)
    obj.trace_check, obj.global_steps = Check(), 2
    obj._stop_rollout_profiling()
    assert calls == ["upstream", ("checked", 2)]
    obj.trace_check, calls[:] = None, []
    obj._stop_rollout_profiling()
    assert calls == ["upstream"]
