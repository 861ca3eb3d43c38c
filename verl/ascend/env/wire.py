"""What a process that receives the env profile reads: the wire variable, its JSON, the host test.

The driver's evaluator (:mod:`verl.ascend.env.profile`) writes the profile as JSON into
``VERL_ASCEND_ENV_PROFILE``; the Ascend platform (``rollout_env_vars``) and the vLLM plugin read it
back in Ray actors and vLLM processes. Standard library only: those processes pay no YAML, OmegaConf
or table for it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

PROFILE_ENV = "VERL_ASCEND_ENV_PROFILE"


def is_arm_cpu(arch: str) -> bool:
    """vllm-ascend's own test (``vllm_ascend/cpu_binding.py`` ``is_arm_cpu``): unknown counts as not ARM."""
    arch = arch.lower()
    return arch in {"aarch64", "arm64"} or arch.startswith("arm")


def profile_from_environ(environ: Mapping[str, str] | None = None) -> dict | None:
    """The profile JSON this process received (``None`` when no profile was applied)."""
    raw = (os.environ if environ is None else environ).get(PROFILE_ENV)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{PROFILE_ENV} is not valid JSON ({e}); it is written by verl.ascend.env.profile.apply_to_config"
        ) from e
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError(f"{PROFILE_ENV}: unsupported profile format {str(data)[:80]!r}; expected version 1")
    return data


def rollout_env_from_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``rollout`` role of the profile this process received ({} without a profile)."""
    data = profile_from_environ(environ)
    return dict(data.get("rollout", {})) if data else {}
