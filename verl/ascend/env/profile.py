"""Resolve the NPU runtime-environment profile of a job, check its conflicts, deliver it.

The evaluator, top of the package's one-way layering: ``table`` (the table ``profile.yaml``,
its conditions and result types) <- ``stack`` (the target release's surface) <- ``vllm_switches``
(the vLLM / vllm-ascend half) <- this module <- ``rules`` (the checks) and the commands:

- :func:`evaluate_env_profile` -> (:class:`EnvProfile`, every violated rule); inside
  :func:`evaluated_once` (a dry run, a launch) once per state of what it reads;
- :func:`resolve_env_profile` raises :class:`EnvConflictError` on the first violated rule;
  :func:`find_conflicts` returns them all;
- :func:`apply_to_config` resolves and writes the result into the config so that it reaches
  every process: the ``train`` role into ``ray_kwargs.ray_init.runtime_env.env_vars`` (the
  job's runtime_env, inherited by every Ray actor), and the whole profile as JSON in
  ``VERL_ASCEND_ENV_PROFILE`` (:mod:`verl.ascend.env.wire`), from which the Ascend platform's
  ``rollout_env_vars()`` serves the ``rollout`` role to every rollout server actor and thus to
  the vLLM processes it spawns.

Precedence: ``ascend.env.overrides.VAR`` > ``ray_kwargs.ray_init.runtime_env.env_vars.VAR`` >
the launching shell's ``VAR`` > the table. An explicit value wins unless it breaks a
conflict rule, which is an error naming both switches and the rule.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import platform
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from verl.ascend.env import vllm_switches
from verl.ascend.env.stack import ENV_KEY as STACK_TARGET_ENV
from verl.ascend.env.table import (
    ADDITIONAL_CONFIG_KEY,
    RAY_ENV_KEY,
    ROLES,
    TABLE_PATH,
    EnvConflictError,
    EnvProfile,
    EnvSetting,
    holds,
    load_table,
    render,
    select,
    table_variables,
)
from verl.ascend.env.wire import PROFILE_ENV, is_arm_cpu
from verl.ascend.ops.switches import FusedOpSwitches
from verl_ascend.checks.effective import ENFORCE_EAGER_KEYS, rollout_enforce_eager
from verl_ascend.envs import parse_bool

DEFAULTS_PATH = Path(__file__).parents[1] / "config" / "ascend.yaml"
KNOBS = ("mc2", "aiv")
HOST_CPUS = ("auto", "aarch64", "x86_64")
# ascend.env keys that existed once: the error says why they are gone instead of "unknown key".
REMOVED_KNOBS = {
    "vllm_v1": "VLLM_USE_V1 does not exist in vLLM 0.23 (V1 is its only engine; verl passes enable_chunked_prefill)"
}

__all__ = [
    "ADDITIONAL_CONFIG_KEY",
    "PROFILE_ENV",
    "RAY_ENV_KEY",
    "ROLES",
    "TABLE_PATH",
    "EnvConflictError",
    "EnvProfile",
    "EnvSetting",
    "apply_to_config",
    "ascend_settings",
    "evaluate_env_profile",
    "evaluated_once",
    "find_conflicts",
    "holds",
    "is_arm_cpu",
    "load_table",
    "resolve_env_profile",
    "table_variables",
]


@functools.cache
def _defaults() -> dict:
    with open(DEFAULTS_PATH) as f:
        return yaml.safe_load(f)["ascend"]


def _parse_knob(raw: Any, key: str, errors: list[EnvConflictError]) -> str | bool:
    if isinstance(raw, str) and raw.strip().lower() == "auto":
        return "auto"
    try:
        return parse_bool(key, raw)
    except ValueError:
        errors.append(
            EnvConflictError("invalid_value", (key,), f"{raw!r} is not accepted; accepted: auto, true, false")
        )
        return "auto"


def ascend_settings(config: DictConfig | Mapping | None, errors: list[EnvConflictError] | None = None) -> dict:
    """The ``ascend:`` section merged over its defaults, checked (problems appended to ``errors``)."""
    errors = errors if errors is not None else []
    defaults = _defaults()
    raw = (
        OmegaConf.select(config, "ascend", default=None)
        if isinstance(config, DictConfig)
        else (config or {}).get("ascend")
    )
    user = OmegaConf.to_container(raw, resolve=True) if isinstance(raw, DictConfig) else dict(raw or {})
    for key in sorted(set(user) - set(defaults)):
        errors.append(
            EnvConflictError("invalid_value", (f"ascend.{key}",), f"unknown key; accepted: {', '.join(defaults)}")
        )
    env_user = dict(user.get("env") or {})
    for key in sorted(set(env_user) - set(defaults["env"])):
        why = f"{REMOVED_KNOBS[key]}; remove it" if key in REMOVED_KNOBS else "unknown key"
        errors.append(
            EnvConflictError("invalid_value", (f"ascend.env.{key}",), f"{why}; accepted: {', '.join(defaults['env'])}")
        )
    for key in sorted(set(user.get("stack") or {}) - set(defaults["stack"])):
        errors.append(
            EnvConflictError(
                "invalid_value", (f"ascend.stack.{key}",), f"unknown key; accepted: {', '.join(defaults['stack'])}"
            )
        )
    fused = {**defaults["fused_ops"], **dict(user.get("fused_ops") or {})}
    try:
        switches = FusedOpSwitches.from_config(fused)
    except ValueError as e:
        errors.append(EnvConflictError("invalid_value", ("ascend.fused_ops",), str(e)))
        switches = FusedOpSwitches()
    knobs = {k: _parse_knob(env_user.get(k, defaults["env"][k]), f"ascend.env.{k}", errors) for k in KNOBS}
    host_cpu = _host_cpu(env_user.get("host_cpu", defaults["env"]["host_cpu"]), errors)
    overrides = env_user.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        errors.append(EnvConflictError("invalid_value", ("ascend.env.overrides",), "must be a mapping VAR: value"))
        overrides = {}
    return {
        "fused_ops": switches,
        "knobs": knobs,
        "host_cpu": host_cpu,
        "overrides": {str(k): v for k, v in overrides.items()},
    }


def _host_cpu(raw: Any, errors: list[EnvConflictError]) -> tuple[str, str]:
    """(architecture, where it came from) of the NPU hosts, from ``ascend.env.host_cpu``.

    ``auto`` reads ``platform.machine()`` here: the profile is resolved once, in the driver, for
    processes that run on the NPU nodes, so auto is right when the driver runs on one of them (the
    documented launch from the Ray head node); a driver on another kind of host must declare it.
    """
    value, here = str(raw).strip().lower(), platform.machine().lower()
    if value == "auto":
        return here, "ascend.env.host_cpu=auto: platform.machine() of the process resolving the profile"
    if value in HOST_CPUS:
        return value, f"declared: ascend.env.host_cpu={value}"
    accepted = ", ".join(HOST_CPUS)
    errors.append(EnvConflictError("invalid_value", ("ascend.env.host_cpu",), f"{raw!r} is not accepted; accepted: {accepted}"))
    return here, "ascend.env.host_cpu invalid, platform.machine() used"


def config_facts(config, settings: dict) -> dict[str, Any]:
    # What vLLM is handed: engine_kwargs.vllm.enforce_eager over rollout.enforce_eager (rollout.name=vllm).
    enforce_eager = rollout_enforce_eager(lambda key: select(config, key)) or False
    tp = select(config, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1)
    facts = {
        "trainer.device": select(config, "trainer.device"),
        "rollout.engine": select(config, "actor_rollout_ref.rollout.name"),
        "rollout.graph_mode": not bool(enforce_eager),
        "rollout.tp": int(tp) if tp is not None else 1,
        "rollout.chunked_prefill": bool(select(config, "actor_rollout_ref.rollout.enable_chunked_prefill", False)),
        "mc2": False,
    }
    switches: FusedOpSwitches = settings["fused_ops"]
    facts["knob.fused_ops.enable"] = switches.enable
    for op in ("rms_norm", "swiglu", "rotary_mul"):
        facts[f"knob.fused_ops.{op}"] = switches.is_on(op)
    for knob, value in settings["knobs"].items():
        facts[f"knob.{knob}"] = value
    facts["host.cpu"], facts["host.cpu_source"] = settings["host_cpu"]
    facts["host.arm"] = is_arm_cpu(facts["host.cpu"])
    return facts


def _cpu_binding_fact(facts: dict, profile: EnvProfile) -> None:
    """``rollout.vllm_ascend_binds_cpus``: whether vllm-ascend binds its workers' CPUs itself.

    It does for a vLLM rollout on an ARM host unless ``additional_config.enable_cpu_binding`` is
    false (default true in vllm-ascend 0.23.0-0.25.1rc1, ``ascend_config.py``).
    """
    explicit = profile.additional_config.get("enable_cpu_binding")
    enabled = True if explicit is None else bool(json.loads(explicit.value))  # vllm-ascend tests truthiness
    vllm = facts["rollout.engine"] in ("vllm", None)  # None: no engine named yet (upstream's default is ???)
    facts["rollout.vllm_ascend_binds_cpus"] = vllm and facts["host.arm"] and enabled


# --------------------------------------------------------------------------------------------
# Resolution


def _normalise(var: dict, raw: Any, source_key: str, errors: list[EnvConflictError]) -> str | None:
    """Check an explicit value against the table; ``None`` (plus an error) if not accepted."""
    name = var["name"]
    if var.get("type") == "bool":
        try:
            return "1" if parse_bool(source_key, raw) else "0"
        except ValueError:
            errors.append(
                EnvConflictError("invalid_value", (name, source_key), f"{raw!r} is not accepted; accepted: 1, 0")
            )
            return None
    value = ("1" if raw else "0") if isinstance(raw, bool) else str(raw)
    allowed = var.get("allowed")
    if allowed is not None and value not in [str(a) for a in allowed]:
        errors.append(
            EnvConflictError(
                "invalid_value",
                (name, source_key),
                f"{value!r} is not accepted; accepted: {', '.join(map(str, allowed))}",
            )
        )
        return None
    pattern = var.get("pattern")
    if pattern is not None and not re.fullmatch(pattern, value):
        errors.append(
            EnvConflictError("invalid_value", (name, source_key), f"{value!r} is not accepted; must match {pattern}")
        )
        return None
    low, high = var.get("range", (None, None))
    if low is not None and not low <= int(value) <= high:
        errors.append(
            EnvConflictError("invalid_value", (name, source_key), f"{value} is out of range; accepted: {low}..{high}")
        )
        return None
    return value


def _applied_keys(env_vars: Mapping) -> set[str]:
    """Keys an earlier ``apply_to_config`` wrote into the runtime env (recorded in the profile JSON)."""
    try:
        return set(json.loads(env_vars[PROFILE_ENV]).get("applied", [])) if PROFILE_ENV in env_vars else set()
    except (TypeError, ValueError, AttributeError):
        return set()


def _explicit_values(config, environ: Mapping[str, str], settings: dict) -> dict[str, tuple[Any, str, str, bool]]:
    """VAR -> (raw value, source kind, source key, scoped to the table's roles)."""
    known = table_variables()
    found: dict[str, tuple[Any, str, str, bool]] = {}
    for name in known:
        if name in environ and str(environ[name]) != "":
            found[name] = (environ[name], "environ", "environment", False)
    ray_env = select(config, RAY_ENV_KEY)
    if ray_env is not None:
        ray_env = OmegaConf.to_container(ray_env, resolve=True) if isinstance(ray_env, DictConfig) else dict(ray_env)
        applied = _applied_keys(ray_env)  # written by an earlier apply_to_config: ours, not the user's
        for name, value in ray_env.items():
            if name in known and name not in applied:
                found[name] = (value, "ray_kwargs", f"{RAY_ENV_KEY}.{name}", False)
    for name, value in settings["overrides"].items():
        found[name] = (value, "override", f"ascend.env.overrides.{name}", True)
    return found


def _update_env_facts(facts: dict, profile: EnvProfile, name: str) -> None:
    for role in ROLES:
        facts[f"env.{role}.{name}"] = profile.effective(role).get(name)
    setting = profile.settings["rollout"].get(name) or profile.settings["train"].get(name)
    facts[f"source.{name}"] = setting.source if setting else None


def _choose(var: dict, facts: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]] | None:
    for entry in var.get("choose", []):
        if not holds(entry.get("when"), facts):
            continue
        if "value_from" in entry:
            value = facts[entry["value_from"]]
            value = ("1" if value else "0") if isinstance(value, bool) else str(value)
        else:
            value = entry.get("value")
        if value is None:
            return None
        per_role = (
            {str(r): str(v) for r, v in value.items()}
            if isinstance(value, Mapping)
            else {role: str(value) for role in var["roles"]}
        )
        reason = entry["reason"]
        reasons = {role: render(reason[role] if isinstance(reason, Mapping) else reason, facts) for role in per_role}
        return per_role, reasons
    return None


def _conflict_message(item: dict, profile: EnvProfile) -> str:
    details = []
    for key in item["keys"]:
        for role in ROLES:
            setting = profile.settings[role].get(key)
            if setting is not None and setting.source != "table":
                details.append(f"{key}={setting.value} ({setting.reason})")
                break
    suffix = f" [explicit: {'; '.join(details)}]" if details else ""
    return item["rule"] + suffix


# Every config key the evaluation reads (a test proves the list against the code): the cache key of
# evaluated_once() is their values, not the whole config, which takes as long to resolve as an evaluation.
READS = (
    "ascend",
    "trainer.device",
    "actor_rollout_ref.rollout.name",
    *ENFORCE_EAGER_KEYS,
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.rollout.enable_chunked_prefill",
    ADDITIONAL_CONFIG_KEY,
    RAY_ENV_KEY,
)
# Inside evaluated_once(): (config state, environment) -> (profile, errors). None outside: no caching.
_memo: dict | None = None


@contextlib.contextmanager
def evaluated_once() -> Iterator[None]:
    """Within this block the profile is evaluated once per config state and environment.

    Why: the dry run asks for it three times (effective settings, the env section, the checks' rule)
    on one config, a launch twice (the checks' rule, then ``apply_to_config``, after the driver
    exported its own variables). The key is the values the evaluation reads (:data:`READS`,
    :func:`_reads_variable`), not the object, so a config changed where it is read (``apply_to_config``
    writes into it) is evaluated again; outside the block nothing
    is kept, so no later caller (a test patching the table, a second job) sees a stale profile.
    """
    global _memo
    outer, _memo = _memo, ({} if _memo is None else _memo)
    try:
        yield
    finally:
        _memo = outer


def _reads_variable(name: str) -> bool:
    """Whether the evaluation reads this variable, from the environment or from the job's Ray env
    (:data:`RAY_ENV_KEY`): the table's variables, ``VLLM_*`` (passed on to vLLM, name-checked) and the
    stack targets (``VERL_ASCEND_TARGET_*``). A test proves that no other variable changes the result.

    Why it matters: between the launch's checks and ``apply_to_config`` the driver exports its own
    variables (``VERL_USE_EXTERNAL_MODULES``, the run folder, ...) into both; they must not make a
    second evaluation of an unchanged profile.
    """
    return name in table_variables() or name.startswith("VLLM_") or name in STACK_TARGET_ENV.values()


def _state(config, environ: Mapping[str, str]) -> tuple[str, tuple] | None:
    """What an evaluation depends on (the values of :data:`READS` and of the variables it reads), hashable.

    None when those values cannot be resolved: then nothing is cached and the evaluation says what is wrong.
    """
    try:
        values = [select(config, key) for key in READS]
        values = [OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v for v in values]
        ray_env = values[READS.index(RAY_ENV_KEY)]
        if isinstance(ray_env, Mapping):  # PROFILE_ENV there names what an earlier delivery wrote
            values[READS.index(RAY_ENV_KEY)] = {k: v for k, v in ray_env.items() if _reads_variable(str(k)) or k == PROFILE_ENV}
        read_environ = tuple(sorted((str(k), str(v)) for k, v in environ.items() if _reads_variable(str(k))))
        return json.dumps(values, sort_keys=True, default=repr), read_environ
    except Exception:  # noqa: BLE001 -- an unresolvable interpolation is the evaluation's to report
        return None


def evaluate_env_profile(config, environ: Mapping[str, str] | None = None) -> tuple[EnvProfile, list[EnvConflictError]]:
    """The profile and every violated rule, without raising (once per config state in :func:`evaluated_once`)."""
    environ = os.environ if environ is None else environ
    key = _state(config, environ) if _memo is not None else None
    if key is not None and key in _memo:
        return copy.deepcopy(_memo[key])
    result = _evaluate(config, environ)
    if key is not None:
        _memo[key] = copy.deepcopy(result)
    return result


def _evaluate(config, environ: Mapping[str, str]) -> tuple[EnvProfile, list[EnvConflictError]]:
    errors: list[EnvConflictError] = []
    settings = ascend_settings(config, errors)
    facts = config_facts(config, settings)
    explicit = _explicit_values(config, environ, settings)
    profile = EnvProfile(host_cpu=facts["host.cpu"])
    vllm_switches.resolve(config, environ, facts, profile, errors, settings)
    _cpu_binding_fact(facts, profile)
    variables = table_variables()
    for name, var in variables.items():
        if name in explicit:
            raw, kind, key, scoped = explicit[name]
            value = _normalise(var, raw, key, errors)
            if value is not None:
                for role in var["roles"] if scoped else ROLES:
                    profile.settings[role][name] = EnvSetting(name, value, role, f"set explicitly: {key}", kind)
        else:
            chosen = _choose(var, facts)
            if chosen is not None:
                per_role, reasons = chosen
                for role, value in per_role.items():
                    profile.settings[role][name] = EnvSetting(name, value, role, reasons[role], "table")
        override = var.get("rollout_override")
        if override and override in profile.effective("rollout"):
            value = profile.effective("rollout")[override]
            profile.settings["rollout"][name] = EnvSetting(
                name, value, "rollout", f"{override}={value}: upstream verl's rollout-only value of {name}", override
            )
        _update_env_facts(facts, profile, name)
    for name, (raw, _kind, key, _scoped) in explicit.items():
        if name not in variables:  # not in the table: passed through, unchecked
            value = ("1" if raw else "0") if isinstance(raw, bool) else str(raw)
            for role in ROLES:
                profile.settings[role][name] = EnvSetting(
                    name, value, role, f"set explicitly: {key} (not in the profile table, not checked)", "override"
                )
    table = load_table()
    for item in table.get("conflicts", []):
        if holds(item["when"], facts):
            errors.append(EnvConflictError(item["id"], item["keys"], _conflict_message(item, profile)))
    for item in table.get("warnings", []):
        if holds(item["when"], facts):
            profile.warnings.append(f"[{item['id']}] {item['message']}")
    return profile, errors


def find_conflicts(config, environ: Mapping[str, str] | None = None) -> list[EnvConflictError]:
    """Every violated rule for this config and environment (empty list: none)."""
    return evaluate_env_profile(config, environ)[1]


def resolve_env_profile(config, environ: Mapping[str, str] | None = None) -> EnvProfile:
    """The profile for this config; raises :class:`EnvConflictError` on the first violated rule."""
    profile, errors = evaluate_env_profile(config, environ)
    if errors:
        raise errors[0]
    return profile


# --------------------------------------------------------------------------------------------
# Delivery


def apply_to_config(config: DictConfig, environ: Mapping[str, str] | None = None) -> EnvProfile:
    """Resolve the profile and put it where every process will see it; call before ``ray.init``.

    Writes the ``train`` role into ``ray_kwargs.ray_init.runtime_env.env_vars`` (keys the user
    set there are kept: they were explicit inputs) plus ``VERL_ASCEND_ENV_PROFILE`` (the JSON
    the Ascend platform's ``rollout_env_vars()`` reads in whichever process launches rollout
    servers); sets ``VERL_ASCEND_ENV_PROFILE`` in this process too. Idempotent.
    """
    profile = resolve_env_profile(config, environ)
    with open_dict(config):
        if select(config, "ray_kwargs.ray_init.runtime_env") is None:
            OmegaConf.update(config, "ray_kwargs.ray_init.runtime_env", {}, force_add=True)
        if select(config, RAY_ENV_KEY) is None:
            OmegaConf.update(config, RAY_ENV_KEY, {}, force_add=True)
        env_vars = OmegaConf.select(config, RAY_ENV_KEY)
        previous = _applied_keys(env_vars)
        applied = []
        for name, value in profile.job_env_vars().items():
            if name not in env_vars or name in previous:
                env_vars[name] = value
                applied.append(name)
        env_vars[PROFILE_ENV] = profile.to_json(applied)
        _apply_additional_config(config, profile)
    os.environ[PROFILE_ENV] = profile.to_json(applied)
    return profile


def _apply_additional_config(config: DictConfig, profile: EnvProfile) -> None:
    """Put the table's vllm-ascend ``additional_config`` keys where verl forwards them to vLLM.

    verl 0.9.1's vLLM server passes ``rollout.engine_kwargs.vllm`` verbatim into the engine
    arguments (a dict value is JSON-encoded for the CLI); keys the user set there stay as they are.
    """
    chosen = {k: json.loads(s.value) for k, s in profile.additional_config.items() if s.source == "table"}
    if not chosen:
        return
    current = select(config, ADDITIONAL_CONFIG_KEY)
    if isinstance(current, str):  # a JSON string: keep the user's form, merge into it
        merged = {**chosen, **(json.loads(current) if current.strip() else {})}
        OmegaConf.update(config, ADDITIONAL_CONFIG_KEY, json.dumps(merged), force_add=True)
        return
    for key, value in chosen.items():
        if current is None or key not in current:
            OmegaConf.update(config, f"{ADDITIONAL_CONFIG_KEY}.{key}", value, force_add=True)
