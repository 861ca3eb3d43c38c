"""The vLLM / vllm-ascend half of the env profile: version-aware routes and name checks.

Why: vLLM and vllm-ascend only log a line for a variable or ``additional_config`` key they do not
read, so a switch meant for them can do nothing without anyone noticing. Here every such switch
is resolved against the *target* release's surface (:mod:`verl.ascend.env.stack`):

- the table's ``additional_config`` entries (mc2 = ``enable_matmul_allreduce``) are emitted only
  where the target vllm-ascend reads the key; an explicit request for one it does not read
  (``ascend.env.mc2=true`` on 0.25.1rc1) is a ``switch_unavailable`` error, ``auto`` a note;
- the user's own ``actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config`` keys and the
  ``VLLM_*`` variables set in the config must exist in the target release (error), or in the
  shell (warning), for ``trainer.device=npu`` jobs; a deprecated variable with an ``additional_config`` replacement gets a warning
  naming the key;
- a user-set deprecated variable of a table switch (``VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE`` for mc2)
  is reported on that switch: set by the user, read or not by the target, acting or not at the
  rollout TP, and the key that replaces it;
- a target without its own snapshot borrows an older one (the *stand-in*): a name the stand-in
  lacks is a ``switch_unknown_to_stand_in`` warning, not ``switch_unavailable``;
- the target's own requirement pins are checked against the installed verl's (``stack_pin_conflict``);
- the fact ``mc2`` (used by the AIV rule) is true only when mc2 reaches vllm-ascend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.ascend.env import stack
from verl.ascend.env.table import (
    ADDITIONAL_CONFIG_KEY,
    RAY_ENV_KEY,
    EnvConflictError,
    EnvProfile,
    EnvSetting,
    holds,
    select,
    load_table,
    table_variables,
)

MC2_KEY = "enable_matmul_allreduce"
MC2_ENV = "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE"
STACK_KEYS = {"vllm": "ascend.stack.vllm", "vllm-ascend": "ascend.stack.vllm_ascend"}


def user_additional_config(config) -> dict[str, Any]:
    """The user's ``engine_kwargs.vllm.additional_config`` (a mapping or a JSON string; {} if unset)."""
    raw = select(config, ADDITIONAL_CONFIG_KEY)
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
            profile.stack[package] = found = stack.surface(package, config, environ)
        except ValueError as exc:
            errors.append(EnvConflictError("invalid_value", (key,), str(exc)))
            continue
        if found.stand_in:
            profile.notes.append(
                f"{package} {found.version} has no snapshot of its own: its names are borrowed from the newest "
                f"older one, {found.stand_in}; a name {found.stand_in} lacks is reported as unknown, not unavailable"
            )
        _pin_conflicts(found, profile)


def _pin_conflicts(found: stack.Surface, profile: EnvProfile) -> None:
    """Warn where the target release's own pins cannot be installed next to the installed verl.

    A warning, not a refusal: a declared target is a plan checked on a machine that does not have
    it, the conflict is between two packages' requirements (no key of this job fixes it), and the
    route findings for that release are what the declaration is for; pip refuses the install itself,
    and ``verl-ascend stack-gate`` the host.
    """
    verl = stack.requirements_of("verl")
    if verl is None or found.package != "vllm-ascend":
        return
    if not found.requirements:
        if found.stand_in:
            profile.notes.append(
                f"the requirement pins of {found.package} {found.version} are not known here (no snapshot or "
                f"pins file); check them against verl {stack.installed_version('verl')}'s before installing"
            )
        return
    for pin, want in stack.pin_conflicts(list(found.requirements), verl):
        profile.warnings.append(
            f"[stack_pin_conflict] {found.package} {found.version} pins {pin} ({found.pins_source}), but the installed "
            f"verl {stack.installed_version('verl')} requires {want}: pip cannot install both; target "
            f"{found.package} {stack.PINNED[found.package]} (requirements/npu.txt), or wait for a verl that admits {pin}"
        )


def _choose_entry(entry: dict, facts: Mapping[str, Any]) -> dict | None:
    return next((c for c in entry.get("choose", []) if holds(c.get("when"), facts)), None)


def _fallback_variables(key: str, surface) -> list[str]:
    """The deprecated variables of ``additional_config.<key>``: in the target, or any release snapshotted."""
    names = {env for env, k in (surface.env_fallbacks if surface else {}).items() if k == key}
    for path in stack.snapshots("vllm-ascend").values():
        names |= {env for env, k in stack.read_snapshot(path).get("env_fallbacks", {}).items() if k == key}
    return sorted(names)


def _report_user_fallback(entry: dict, name: str, found: dict, surface, facts: dict, key_set: bool) -> str:
    """A user-set deprecated variable, reported on its switch: set by whom, read or not, acting or not."""
    key, knob = entry["key"], entry.get("knob") or entry["key"]
    value, where, _ = found[name]
    head = f"{knob}: {name}={value} is set by the user ({where})"
    if surface is None:
        return f"[env_var_deprecated] {head}; the target vllm-ascend is unknown"
    if surface.stand_in and name not in surface.env_vars:
        return f"[switch_unknown_to_stand_in] {head}; {surface.unknown(name)}"
    if name not in surface.env_vars or surface.env_fallbacks.get(name) != key:
        return f"[env_var_not_read] {head}, but {surface.describe()} does not read it: it does nothing; unset it"
    tp = facts.get("rollout.tp", 1)
    if key_set:
        acts = f"additional_config.{key} is set too and wins, so the variable does nothing"
    elif tp < 2:
        acts = f"it turns {knob} on, but {knob} does nothing at rollout TP {tp}"
    else:
        acts = f"it turns {knob} on at rollout TP {tp}"
    return (
        f"[env_var_deprecated] {head}: {surface.describe()} reads it as a deprecated fallback of "
        f"additional_config.{key}; {acts}. Set {ADDITIONAL_CONFIG_KEY}.{key} instead (the key wins over the variable)"
    )


def _additional_config(config, facts: dict, profile: EnvProfile, errors: list, found: dict) -> set[str]:
    """Resolve the ``additional_config`` keys; returns the user-set variables reported on their switch."""
    surface = profile.stack.get("vllm-ascend")
    reported: set[str] = set()
    try:
        explicit = user_additional_config(config)
    except (TypeError, ValueError) as exc:
        errors.append(EnvConflictError("invalid_value", (ADDITIONAL_CONFIG_KEY,), f"not a mapping or JSON object: {exc}"))
        explicit = {}
    where = f"target {surface.describe()}" if surface else "the target vllm-ascend"
    for key, value in explicit.items():
        if surface is not None and key not in surface.additional_config_keys and surface.stand_in:
            name = f"{ADDITIONAL_CONFIG_KEY}.{key}"
            profile.warnings.append(f"[switch_unknown_to_stand_in] {surface.unknown(name)}")
        elif surface is not None and key not in surface.additional_config_keys:
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
        chosen = None if key in explicit else _choose_entry(entry, facts)
        user_vars = [name for name in _fallback_variables(key, surface) if name in found]
        key_set = key in explicit or (chosen is not None and (surface is None or key in surface.additional_config_keys))
        for name in user_vars:
            profile.warnings.append(_report_user_fallback(entry, name, found, surface, facts, key_set))
        reported |= set(user_vars)
        if key in explicit:
            continue
        if chosen is None:
            if facts.get("rollout.tp", 1) < 2 and knob and not user_vars:
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
    return reported


def _explicit_vllm_env(config, environ: Mapping[str, str], settings: dict) -> dict[str, tuple[str, str, bool]]:
    """``VLLM_*`` variables the user set outside the table: name -> (value, where, set in the config)."""
    table = table_variables()
    found: dict[str, tuple[str, str, bool]] = {}
    for name, value in environ.items():
        if name.startswith("VLLM_") and name not in table:
            found[name] = (str(value), "environment", False)
    ray_env = select(config, RAY_ENV_KEY)
    ray_env = OmegaConf.to_container(ray_env, resolve=True) if isinstance(ray_env, DictConfig) else dict(ray_env or {})
    for name, value in ray_env.items():
        if name.startswith("VLLM_") and name not in table:
            found[name] = (str(value), f"{RAY_ENV_KEY}.{name}", True)
    for name, value in settings["overrides"].items():
        if name.startswith("VLLM_") and name not in table:
            found[name] = (str(value), f"ascend.env.overrides.{name}", True)
    return found


def _check_vllm_env(found: dict, profile: EnvProfile, errors: list, reported: set[str]) -> None:
    vllm, ascend = profile.stack.get("vllm"), profile.stack.get("vllm-ascend")
    for name, (_value, where, in_config) in sorted(found.items()):
        surface = ascend if name.startswith("VLLM_ASCEND_") else vllm
        if surface is None or name in reported:
            continue
        if name not in surface.env_vars and surface.stand_in:
            profile.warnings.append(f"[switch_unknown_to_stand_in] {surface.unknown(name)} ({where})")
        elif name not in surface.env_vars:
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
    found = _explicit_vllm_env(config, environ, settings)
    npu = facts.get("trainer.device") == "npu"  # vllm-ascend's names; a CPU/GPU job's shell is not judged
    reported = _additional_config(config, facts, profile, errors, found if npu else {})
    if npu:
        _check_vllm_env(found, profile, errors, reported)
    facts["mc2"] = _mc2_reaches_vllm_ascend(profile, found)
