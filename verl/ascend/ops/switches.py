"""Per-op switches of the fused-op patches: one config key and one env var per op.

The driver resolves the ``ascend.fused_ops`` config section into env vars (part of the env
profile, so they reach every worker); each worker reads the env vars when it builds its
model. A switch set in a worker's own environment wins over nothing else: it *is* what the
driver sent, or what the user exported there.

=================  ================================  ==============================
op                 config key                        env var
=================  ================================  ==============================
(all, master)      ``ascend.fused_ops.enable``       ``VERL_ASCEND_FUSED_OPS``
RMSNorm            ``ascend.fused_ops.rms_norm``     ``VERL_ASCEND_FUSED_RMS_NORM``
SwiGLU MLP         ``ascend.fused_ops.swiglu``       ``VERL_ASCEND_FUSED_SWIGLU``
rotary embedding   ``ascend.fused_ops.rotary_mul``   ``VERL_ASCEND_FUSED_ROTARY_MUL``
=================  ================================  ==============================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from verl.ascend.envs import FUSED_OPS
from verl_ascend.envs import parse_bool

OPS = ("rms_norm", "swiglu", "rotary_mul")
# Each switch's variable, as the backend declares it (verl/ascend/envs.py: the one place a name is written).
ENV_VARS = {switch: var.name for switch, var in FUSED_OPS.items()}


@dataclass(frozen=True)
class FusedOpSwitches:
    """Which fused ops to patch in; ``enable`` is the master switch."""

    enable: bool = True
    rms_norm: bool = True
    swiglu: bool = True
    rotary_mul: bool = True

    def is_on(self, op: str) -> bool:
        if op not in OPS:
            raise KeyError(f"unknown fused op {op!r}; known: {', '.join(OPS)}")
        return self.enable and getattr(self, op)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FusedOpSwitches:
        env = os.environ if environ is None else environ
        values = {}
        for field in fields(cls):
            var = ENV_VARS[field.name]
            if var in env and str(env[var]).strip() != "":
                values[field.name] = parse_bool(var, env[var])
        return cls(**values)

    @classmethod
    def from_config(cls, section: Mapping | None) -> FusedOpSwitches:
        """From the ``ascend.fused_ops`` mapping; unknown keys are an error naming them."""
        section = dict(section or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ValueError(
                f"ascend.fused_ops: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}"
            )
        return cls(**{k: parse_bool(f"ascend.fused_ops.{k}", v) for k, v in section.items()})
