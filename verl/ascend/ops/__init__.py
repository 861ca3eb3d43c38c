"""Fused-op patches for HF transformers models on Ascend NPUs.

``apply_fused_ops(model_type)`` replaces, for Qwen2/Qwen2.5 (``qwen2``) and Llama
(``llama``), RMSNorm -> ``torch_npu.npu_rms_norm``, the SwiGLU MLP -> ``torch_npu.npu_swiglu``
and the rotary embedding -> ``torch_npu.npu_rotary_mul``, each behind its own switch
(:mod:`verl.ascend.ops.switches`). It runs in every process that builds a model: the FSDP
engine calls it through upstream's ``apply_npu_fsdp_patches`` seam (rerouted in
:mod:`verl.ascend.patch.fsdp_engine`), the only model-building seam verl 0.9.1 calls (its
platform's ``apply_model_patches`` is never called, so it is not overridden); other code may call
``apply_fused_ops`` directly.

Relation to upstream's ``verl/models/transformers/npu_patch.py``:
- architectures listed in :data:`verl.ascend.ops.targets.ARCH_TARGETS` are patched here, with
  per-op switches; upstream's own Qwen2 patch is not run on top (no double patching), and
  if it already ran (someone called it directly) its replacement is kept and reported;
- other architectures that upstream covers (Qwen3, Qwen3-MoE, VL variants, ...) get
  upstream's per-model patch, switched only by the master switch;
- anything else gets one clear warning per process: it runs with plain PyTorch ops.

Every call returns (and logs, one line per model type and process) a :class:`FusedOpReport`
that says exactly which attributes were replaced.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from dataclasses import dataclass, field

from verl.ascend.ops.forwards import FACTORIES
from verl.ascend.ops.switches import ENV_VARS, OPS, FusedOpSwitches
from verl.ascend.ops.targets import ARCH_TARGETS, ArchTarget, OpTarget

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))

UPSTREAM_PATCH_MODULE = "verl.models.transformers.npu_patch"
KERNELS = {
    "rms_norm": "torch_npu.npu_rms_norm",
    "swiglu": "torch_npu.npu_swiglu",
    "rotary_mul": "torch_npu.npu_rotary_mul",
}

__all__ = [
    "FusedOpReport",
    "FusedOpSwitches",
    "apply_fused_ops",
    "applied_reports",
    "revert_fused_ops",
    "covered_model_types",
]


@dataclass
class FusedOpReport:
    """What one ``apply_fused_ops`` call did, attribute by attribute."""

    model_type: str
    switches: FusedOpSwitches
    patched: list[str] = field(default_factory=list)  # "target -> kernel" newly replaced now
    already: list[str] = field(default_factory=list)  # ours, from an earlier call in this process
    kept_upstream: list[str] = field(default_factory=list)  # upstream npu_patch got there first
    switched_off: list[str] = field(default_factory=list)  # left (or restored) to the original
    unrevertible: list[str] = field(default_factory=list)  # off, but upstream already replaced it
    upstream_model_patch: bool = False  # upstream's per-model patch applied (no per-op switches)
    covered: bool = True

    @property
    def active(self) -> list[str]:
        """Every target that runs a fused kernel after this call."""
        return self.patched + self.already + self.kept_upstream

    def summary(self) -> str:
        head = f"verl.ascend fused ops, model_type={self.model_type!r}, pid={os.getpid()}"
        if not self.covered:
            return f"{head}: no fused-op coverage; the model runs with plain PyTorch ops"
        if self.upstream_model_patch:
            return f"{head}: applied upstream npu_patch for this model (per-op switches do not apply)"
        parts = []
        for label, items in (
            ("patched", self.patched),
            ("already patched", self.already),
            ("kept upstream npu_patch", self.kept_upstream),
            ("off by switch", self.switched_off),
            ("off by switch but upstream npu_patch already replaced it", self.unrevertible),
        ):
            if items:
                parts.append(f"{label}: " + ", ".join(items))
        return f"{head}: " + ("; ".join(parts) if parts else "nothing to do")


_reports: list[FusedOpReport] = []
_warned_uncovered: set[str] = set()


def covered_model_types() -> tuple[str, ...]:
    return tuple(ARCH_TARGETS)


def applied_reports() -> list[FusedOpReport]:
    """Reports of every ``apply_fused_ops`` call in this process, oldest first."""
    return list(_reports)


def _owner(module, target: OpTarget):
    return getattr(module, target.owner) if target.owner else module


def _current(owner, target: OpTarget):
    if isinstance(owner, type):
        if target.attr not in vars(owner):
            raise AttributeError(f"{owner.__qualname__} defines no {target.attr!r}: the patch target changed")
        return vars(owner)[target.attr]
    return getattr(owner, target.attr)


def _state(fn, op: str) -> str:
    if getattr(fn, "__verl_ascend_fused__", None) == op:
        return "ours"
    if getattr(fn, "__module__", None) == UPSTREAM_PATCH_MODULE:
        return "upstream"
    return "original"


def _apply_arch(arch: ArchTarget, switches: FusedOpSwitches, report: FusedOpReport) -> None:
    module = importlib.import_module(arch.module)
    for target in arch.ops:
        owner = _owner(module, target)
        current = _current(owner, target)
        state = _state(current, target.op)
        name = target.describe(arch.module)
        kernel = KERNELS[target.op]
        if switches.is_on(target.op):
            if state == "ours":
                report.already.append(f"{name} -> {kernel}")
            elif state == "upstream":
                report.kept_upstream.append(f"{name} -> {kernel}")
            else:
                setattr(owner, target.attr, FACTORIES[target.op](current, **dict(target.kwargs)))
                report.patched.append(f"{name} -> {kernel}")
        else:
            if state == "ours":
                setattr(owner, target.attr, current.__wrapped__)
            if state == "upstream":
                report.unrevertible.append(name)
            else:
                report.switched_off.append(f"{name} ({ENV_VARS[target.op]}=0)")


def _apply_upstream_model_patch(model_type: str) -> bool:
    """Run upstream npu_patch's patch for ``model_type`` if it has one; True if it did."""
    try:
        npu_patch = importlib.import_module(UPSTREAM_PATCH_MODULE)
    except ImportError as e:  # torch_npu missing: nothing upstream can do either
        logger.debug("upstream npu_patch unavailable: %s", e)
        return False
    patch = getattr(npu_patch, "NPU_PATCHES", {}).get(model_type)
    if patch is None:
        return False
    patch()
    return True


def apply_fused_ops(model_type: str, switches: FusedOpSwitches | None = None, *, log: bool = True) -> FusedOpReport:
    """Patch the fused ops for ``model_type`` in this process; idempotent; returns a report.

    ``switches`` defaults to :meth:`FusedOpSwitches.from_env` (what the env profile sent).
    Turning a switch off after an earlier call restores that op's original.
    """
    switches = switches if switches is not None else FusedOpSwitches.from_env()
    report = FusedOpReport(model_type=model_type, switches=switches)
    arch = ARCH_TARGETS.get(model_type)
    if arch is not None:
        _apply_arch(arch, switches, report)
    elif switches.enable and _apply_upstream_model_patch(model_type):
        report.upstream_model_patch = True
    elif switches.enable:
        report.covered = False
    else:
        report.switched_off.append(f"all ops ({ENV_VARS['enable']}=0)")
    _reports.append(report)
    if log:
        if not report.covered:
            if model_type not in _warned_uncovered:
                _warned_uncovered.add(model_type)
                logger.warning(
                    "%s. Covered by verl.ascend: %s; by upstream npu_patch: Qwen3/Qwen3-MoE/VL variants.",
                    report.summary(),
                    ", ".join(ARCH_TARGETS),
                )
        else:
            logger.info(report.summary())
    return report


def revert_fused_ops(model_type: str | None = None) -> list[str]:
    """Restore the originals of every op this module patched (for ``model_type``, or all)."""
    restored = []
    for arch in ARCH_TARGETS.values():
        if model_type is not None and arch.model_type != model_type:
            continue
        module = sys.modules.get(arch.module)
        if module is None:
            continue
        for target in arch.ops:
            owner = _owner(module, target)
            current = _current(owner, target)
            if _state(current, target.op) == "ours":
                setattr(owner, target.attr, current.__wrapped__)
                restored.append(target.describe(arch.module))
    return restored


assert set(FACTORIES) == set(OPS) == set(KERNELS)
