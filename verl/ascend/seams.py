"""The Ascend backend's seam rows: its contacts with upstream verl, transformers and torch.

Each row describes code of this backend (``code``) and names its installer by a dotted string
(``install``), so this module imports nothing of the backend and stays cheap: it is loaded at
every ``import verl``, when the ``verl.plugins`` entry point runs ``install("plugin")``. The
toolkit assembles it with the other homes' rows through the entry-point group
``verl_ascend.seams`` (setup.py); ``verl-ascend seams`` prints their status.
"""

from __future__ import annotations

from verl_ascend.seams.index import HasAttr, Seam, SourceContains, SourceLacks

SEAMS: tuple[Seam, ...] = (
    Seam(
        id="emulator_torch_npu_modules",
        kind="module-substitution",
        stage="plugin",
        install="verl.ascend.emulator:install_if_requested",
        target=(
            "sys.modules['torch_npu' / 'torch_npu.npu' / 'torch_npu.npu.mstx' / 'torch.npu'] and the attribute "
            "torch.npu (torch 2.x), with stand-ins for the torch_npu members upstream verl calls "
            "(npu.memory._set_allocator_settings/_snapshot/_record_memory_history/_dump_snapshot, mstx.mark/"
            "range_start/range_end/mstx_range)"
        ),
        why=(
            "The CPU NPU emulator lets the Ascend backend run its tests and the recipe's emulated-NPU e2e run "
            "without Ascend hardware; upstream verl imports torch_npu and calls these members on the NPU platform."
        ),
        switched_on="Only with VERL_ASCEND_NPU_EMULATOR=1 and no real torch_npu (tests); never on real NPUs.",
        upstream_fix="None needed: a test double, not a fix (torch has no registry for device stand-ins).",
        remove_when="never while the NPU tests run without Ascend hardware.",
        test="tests/npu/test_platform.py",
        code="verl/ascend/emulator/__init__.py::install, verl/ascend/emulator/device.py",
        fingerprints={
            "verl.utils.device:is_torch_npu_available": "e198a3436c4cf595",
            "verl.plugin.platform.platform_npu#_set_allocator_settings": "02e1c23bf87e4f4a",
            "verl.utils.memory_utils#_record_memory_history": "73c3ecd974f2d614",
            "verl.utils.memory_utils#_snapshot": "a5d05ccf97945928",
            "verl.utils.memory_utils#_dump_snapshot": "6e051e37f1eb3c9a",
            "verl.utils.profiler.mstx_profile#mstx.range_start": "3c107a90fcb1ad7d",
            "verl.utils.profiler.mstx_profile#mstx.range_end": "2c2879e501e97fe7",
            "verl.utils.profiler.mstx_profile#mstx.mstx_range": "663dd4876809613c",
            "torch#npu": "4032df239da3bb00",
        },
        covers=("sys.modules", "mark"),
    ),
    Seam(
        id="fsdp_npu_patch_hook",
        kind="runtime-patch", stage="plugin", install="verl.ascend.patch.fsdp_engine:install",
        removable_if=(SourceContains("verl.models.transformers.npu_patch", "modeling_llama"),),
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
        test="tests/verl_ascend/seams/test_index.py::test_fingerprint, tests/npu/test_fsdp_hook.py",
        code="verl/ascend/patch/fsdp_engine.py",
        fingerprints={
            "verl.workers.engine.fsdp.utils:apply_npu_fsdp_patches": "d4b53f1c8e480862",
            "verl.workers.engine.fsdp.transformer_impl:FSDPEngine.__init__": "ca413d77abfcefcb",
        },
    ),
    Seam(
        id="transformers_qwen2_fused_ops",
        kind="runtime-patch", stage="worker",
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
        test="tests/verl_ascend/seams/test_index.py::test_fingerprint, tests/npu/test_fused_models.py",
        code="verl/ascend/ops/ (targets.py row 'qwen2')",
        fingerprints={
            "transformers.models.qwen2.modeling_qwen2:Qwen2RMSNorm.forward": "d676bfe9af0e524d",
            "transformers.models.qwen2.modeling_qwen2:Qwen2MLP.forward": "b4e9c2637c7f1172",
            "transformers.models.qwen2.modeling_qwen2:apply_rotary_pos_emb": "e2975ea7060de677",
            "transformers.models.qwen2.modeling_qwen2:Qwen2Attention.forward": "4015c9477db5adb7",
        },
    ),
    Seam(
        id="transformers_llama_fused_ops",
        kind="runtime-patch", stage="worker",
        target=(
            "transformers.models.llama.modeling_llama: LlamaRMSNorm.forward, LlamaMLP.forward, "
            "apply_rotary_pos_emb (transformers 5.10.x)"
        ),
        why="As for qwen2; upstream verl's npu_patch has no Llama coverage at all.",
        switched_on="As for qwen2, when a worker builds a llama model.",
        upstream_fix="As for qwen2.",
        remove_when="As for qwen2.",
        test="tests/verl_ascend/seams/test_index.py::test_fingerprint, tests/npu/test_fused_models.py",
        code="verl/ascend/ops/ (targets.py row 'llama')",
        fingerprints={
            "transformers.models.llama.modeling_llama:LlamaRMSNorm.forward": "d676bfe9af0e524d",
            "transformers.models.llama.modeling_llama:LlamaMLP.forward": "b4e9c2637c7f1172",
            "transformers.models.llama.modeling_llama:apply_rotary_pos_emb": "e2975ea7060de677",
            "transformers.models.llama.modeling_llama:LlamaAttention.forward": "c0fd8e0b732ba611",
        },
    ),
    Seam(
        id="emulator_npu_flag",
        kind="runtime-patch", stage="plugin",
        removable_if=(SourceLacks("verl", "from .utils.device import is_npu_available"),),
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
    Seam(
        id="vllm_env_check",
        kind="runtime-patch", stage="vllm", install="verl.ascend.env.vllm_plugin:register",
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
        switched_on=(
            "vllm.general_plugins entry point verl_ascend_env_check, in every vLLM process; the observer, the env "
            "line and the host-CPU check on the NPU platform only. On any platform it writes DIR/<pid>.json of what "
            "arrived when VERL_ASCEND_VLLM_ENV_REPORT=DIR is set (the acceptance run), and touches nothing else."
        ),
        upstream_fix="None needed: a check, not a fix; vLLM has no hook that reports a process's environment.",
        remove_when="never while the env profile is delivered through the rollout servers' runtime_env.",
        test="tests/npu/test_vllm_plugin.py",
        code="verl/ascend/env/vllm_plugin.py",
    ),
    Seam(
        id="ascend_auto_set_device",
        kind="runtime-patch", stage="plugin", install="verl.ascend.patch.driver_checks:install",
        removable_if=(HasAttr("verl.plugin.platform.platform_base:PlatformBase.update_config"),),
        target="verl.utils.device.auto_set_device, in the driver of python -m verl.trainer.main_ppo only (verl==0.9.1)",
        why=(
            "Upstream's main_ppo starts Ray, TransferQueue and the worker group before anything reads "
            "actor_rollout_ref.rollout.name (mandatory, ??? in its config) or imports the engine; an unset name, "
            "an engine not installed or an unknown vLLM engine argument then dies in a traceback from inside a Ray "
            "actor. auto_set_device is the first thing main does with the config, in the driver. On the Ascend "
            "platform the wrapper runs verl_ascend.checks.rules_engine's checks after upstream's function and "
            "exits 2 naming the key and the accepted values."
        ),
        switched_on=(
            "Ascend backend plugin, armed only where __main__ is verl.trainer.main_ppo; acts only when the current "
            "platform is AscendPlatform (the CPU platform's wrapper is cpu_auto_set_device)."
        ),
        upstream_fix=(
            "None filed yet: main_ppo checking mandatory values (OmegaConf.missing_keys) and the rollout engine "
            "before ray.init, or a platform hook (PlatformBase.update_config(config)) called by auto_set_device."
        ),
        remove_when="upstream's driver refuses an unset or uninstalled rollout engine before Ray starts.",
        test="tests/npu/test_driver_checks.py",
        code="verl/ascend/patch/driver_checks.py",
        fingerprints={
            "verl.utils.device:auto_set_device": "031feb0fd9353899",
            "verl.trainer.main_ppo:main": "eb706c4f6622ed04",
        },
    ),
)
