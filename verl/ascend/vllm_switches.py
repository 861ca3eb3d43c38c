"""The vLLM / vllm-ascend half of the env profile: version-aware routes and name checks.

Why: vLLM and vllm-ascend only log a line for a variable or ``additional_config`` key they do not
read, so a switch meant for them can do nothing without anyone noticing. Here every such switch
is resolved against the *target* release's surface (:mod:`verl.ascend.stack`):

- the table's ``additional_config`` entries (mc2 = ``enable_matmul_allreduce``) are emitted only
  where the target vllm-ascend reads the key; an explicit request for one it does not read
  (``ascend.env.mc2=true`` on 0.25.1rc1) is a ``switch_unavailable`` error, ``auto`` a note;
- the user's own ``actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config`` keys and the
  ``VLLM_*`` variables set in the config must exist in the target release (error), or in the
  shell (warning), for ``trainer.device=npu`` jobs; a deprecated variable with an ``additional_config`` replacement gets a warning
  naming the key;
- the fact ``mc2`` (used by the AIV rule) is true only when mc2 reaches vllm-ascend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.ascend import stack
from verl.ascend.env_profile import (
    ADDITIONAL_CONFIG_KEY,
    RAY_ENV_KEY,
    EnvConflictError,
    EnvProfile,
    EnvSetting,
    _select,
    holds,
    load_table,
    table_variables,
)

MC2_KEY = "enable_matmul_allreduce"
MC2_ENV = "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE"
STACK_KEYS = {"vllm": "ascend.stack.vllm", "vllm-ascend": "ascend.stack.vllm_ascend"}


def user_additional_config(config) -> dict[str, Any]:
    """The user's ``engine_kwargs.vllm.additional_config`` (a mapping or a JSON string; {} if unset)."""
    raw = _select(config, ADDITIONAL_CONFIG_KEY)
    if raw is None:
        return {}
    if isinstance(raw, DictConfig):
        return OmegaConf.to_container(raw, resolve=True)
    if isinstance(raw, str):
        return dict(json.loads(raw)) if raw.strip() else {}
    return dict(raw)


def _surfaces(config, environ, profile: EnvProfile, errors: list) -> None:
    for package, key in STACK_KEYS.items():
        try:
            profile.stack[package] = stack.surface(package, config, environ)
        except ValueError as exc:
            errors.append(EnvConflictError("invalid_value", (key,), str(exc)))


def _choose_entry(entry: dict, facts: Mapping[str, Any]) -> dict | None:
    return next((c for c in entry.get("choose", []) if holds(c.get("when"), facts)), None)


def _additional_config(config, facts: dict, profile: EnvProfile, errors: list) -> None:
    surface = profile.stack.get("vllm-ascend")
    try:
        explicit = user_additional_config(config)
    except (TypeError, ValueError) as exc:
        errors.append(EnvConflictError("invalid_value", (ADDITIONAL_CONFIG_KEY,), f"not a mapping or JSON object: {exc}"))
        explicit = {}
    where = f"target {surface.describe()}" if surface else "the target vllm-ascend"
    for key, value in explicit.items():
        if surface is not None and key not in surface.additional_config_keys:
            errors.append(
                EnvConflictError(
                    "switch_unavailable",
                    (f"{ADDITIONAL_CONFIG_KEY}.{key}",),
                    f"{where} never reads additional_config.{key}; remove it or target a release that has it",
                )
            )
        profile.additional_config[key] = EnvSetting(
            key, json.dumps(value), "rollout", f"set explicitly: {ADDITIONAL_CONFIG_KEY}.{key}", "engine_kwargs"
        )
    for entry in load_table().get("additional_config", []):
        key, knob = entry["key"], entry.get("knob")
        if key in explicit:
            continue
        chosen = _choose_entry(entry, facts)
        if chosen is None:
            if facts.get("rollout.tp", 1) < 2 and knob:
                profile.notes.append(f"{knob} (additional_config.{key}): not applicable at rollout TP 1, not set")
            continue
        if surface is not None and key not in surface.additional_config_keys:
            message = f"{knob or key} (additional_config.{key}) is not available on {where}: {entry.get('removed', '')}"
            if facts.get(f"knob.{knob}") is True:
                errors.append(EnvConflictError("switch_unavailable", (f"ascend.env.{knob}",), message + "; set it to auto"))
            else:
                profile.notes.append(message + "; not set (its auto rules treat it as off)")
            continue
        profile.additional_config[key] = EnvSetting(key, json.dumps(chosen["value"]), "rollout", chosen["reason"], "table")


def _explicit_vllm_env(config, environ: Mapping[str, str], settings: dict) -> dict[str, tuple[str, str, bool]]:
    """``VLLM_*`` variables the user set outside the table: name -> (value, where, set in the config)."""
    table = table_variables()
    found: dict[str, tuple[str, str, bool]] = {}
    for name, value in environ.items():
        if name.startswith("VLLM_") and name not in table:
            found[name] = (str(value), "environment", False)
    ray_env = _select(config, RAY_ENV_KEY)
    ray_env = OmegaConf.to_container(ray_env, resolve=True) if isinstance(ray_env, DictConfig) else dict(ray_env or {})
    for name, value in ray_env.items():
        if name.startswith("VLLM_") and name not in table:
            found[name] = (str(value), f"{RAY_ENV_KEY}.{name}", True)
    for name, value in settings["overrides"].items():
        if name.startswith("VLLM_") and name not in table:
            found[name] = (str(value), f"ascend.env.overrides.{name}", True)
    return found


def _check_vllm_env(found: dict, profile: EnvProfile, errors: list) -> None:
    vllm, ascend = profile.stack.get("vllm"), profile.stack.get("vllm-ascend")
    for name, (_value, where, in_config) in sorted(found.items()):
        surface = ascend if name.startswith("VLLM_ASCEND_") else vllm
        if surface is None:
            continue
        if name not in surface.env_vars:
            message = f"{surface.describe()} does not read {name}: it does nothing ({where})"
            if in_config:
                errors.append(EnvConflictError("switch_unavailable", (name, where), message + "; remove it"))
            else:
                profile.warnings.append(f"[env_var_not_read] {message}; unset it")
        elif name in surface.env_fallbacks:
            key = surface.env_fallbacks[name]
            profile.warnings.append(
                f"[env_var_deprecated] {name} ({where}) is a deprecated fallback in {surface.describe()}; set "
                f"{ADDITIONAL_CONFIG_KEY}.{key} instead (the key wins over the variable)"
            )


def _mc2_reaches_vllm_ascend(profile: EnvProfile, found: dict) -> bool:
    if MC2_KEY in profile.additional_config:
        return bool(json.loads(profile.additional_config[MC2_KEY].value))
    surface = profile.stack.get("vllm-ascend")
    value = found.get(MC2_ENV, ("0",))[0]
    return value.strip().lower() in ("1", "true") and surface is not None and MC2_ENV in surface.env_fallbacks


def resolve(config, environ: Mapping[str, str], facts: dict, profile: EnvProfile, errors: list, settings: dict) -> None:
    """Fill ``profile.stack`` / ``additional_config`` / notes, the ``stack.has.*`` and ``mc2`` facts."""
    _surfaces(config, environ, profile, errors)
    surface = profile.stack.get("vllm-ascend")
    for entry in load_table().get("additional_config", []):
        facts[f"stack.has.{entry['key']}"] = surface is None or entry["key"] in surface.additional_config_keys
    _additional_config(config, facts, profile, errors)
    found = _explicit_vllm_env(config, environ, settings)
    if facts.get("trainer.device") == "npu":  # vllm-ascend's names; a CPU/GPU job's shell is not judged
        _check_vllm_env(found, profile, errors)
    facts["mc2"] = _mc2_reaches_vllm_ascend(profile, found)
