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
        test="tests/npu/test_vllm_plugin.py",
        code="verl/ascend/env/vllm_plugin.py",
    ),
    Seam(
        id="ascend_auto_set_device",
        kind="runtime-patch", stage="plugin", install="verl.ascend.patch.driver_checks:install",
        removable_if=(HasAttr("verl.plugin.platform.platform_base:PlatformBase.update_config"),),
        target="verl.utils.device.auto_set_device, in the driver of python -m verl.trainer.main_ppo only (verl==0.9.1)",
        test="tests/npu/test_driver_checks.py",
        code="verl/ascend/patch/driver_checks.py",
        fingerprints={
            "verl.utils.device:auto_set_device": "031feb0fd9353899",
            "verl.trainer.main_ppo:main": "eb706c4f6622ed04",
        },
    ),
)
