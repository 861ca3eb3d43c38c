"""The env-profile table and the types of what it produces: the bottom layer of :mod:`verl.ascend.env`.

``profile.yaml`` (next to this file) lists, for each variable, the roles that need it, the values it
accepts and an ordered ``choose`` list of (condition on the facts, value, reason). This module reads
the table and evaluates its conditions (:func:`holds`) and reasons (:func:`render`); it imports no other
module of the package, so everything above it (the stack surfaces, the vLLM switches, the evaluator,
the checks and the commands) leans on it one way.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

TABLE_PATH = Path(__file__).with_name("profile.yaml")
ROLES = ("train", "rollout")
ADDITIONAL_CONFIG_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config"
RAY_ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"


class EnvConflictError(ValueError):
    """A violated rule of the env profile: a conflict between switches, or a value not accepted.

    ``rule`` is a short stable id (``device_npu_platform_mismatch``, ``switch_unavailable``,
    ``invalid_value``); ``keys`` are the switches involved (env var names and/or config keys).
    """

    def __init__(self, rule: str, keys: tuple[str, ...] | list[str], message: str):
        self.rule = rule
        self.keys = tuple(keys)
        super().__init__(f"[{rule}] {' + '.join(self.keys)}: {message}")


@dataclass(frozen=True)
class EnvSetting:
    """One resolved variable for one role, and why it has that value."""

    name: str
    value: str
    role: str
    reason: str
    source: str  # table | override | ray_kwargs | environ | <VAR> (rollout override)


@dataclass
class EnvProfile:
    """The resolved profile: per role (``train``, ``rollout``) the variables set and why.

    - ``settings[role][VAR]`` -> :class:`EnvSetting` (only variables that are set);
    - :meth:`env` / :meth:`effective`: plain ``{VAR: value}`` of a role (``effective`` adds
      what a rollout process inherits from the job-wide train values);
    - :meth:`reason`; :meth:`lines` (the CLI's output); ``warnings`` (not errors);
    - :meth:`job_env_vars` / :meth:`rollout_env_vars`: what is delivered where.
    """

    settings: dict[str, dict[str, EnvSetting]] = field(default_factory=lambda: {r: {} for r in ROLES})
    warnings: list[str] = field(default_factory=list)
    # vllm-ascend additional_config key -> setting (role "rollout"; value JSON-encoded); delivered
    # through actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config, not the environment.
    additional_config: dict[str, EnvSetting] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # decisions worth a line, never a problem
    stack: dict[str, Any] = field(default_factory=dict)  # package -> verl.ascend.env.stack.Surface
    host_cpu: str = ""  # the NPU hosts' CPU the profile was resolved for (ascend.env.host_cpu)

    def additional_config_values(self) -> dict[str, Any]:
        return {k: json.loads(s.value) for k, s in self.additional_config.items()}

    def env(self, role: str) -> dict[str, str]:
        return {k: s.value for k, s in self.settings[role].items()}

    def effective(self, role: str) -> dict[str, str]:
        if role == "rollout":
            return {**self.env("train"), **self.env("rollout")}
        return self.env(role)

    def reason(self, name: str, role: str = "train") -> str | None:
        setting = self.settings[role].get(name)
        return setting.reason if setting else None

    def job_env_vars(self) -> dict[str, str]:
        """The ``train`` role: goes into the job's Ray runtime_env (every actor)."""
        return self.env("train")

    def rollout_env_vars(self) -> dict[str, str]:
        """The ``rollout`` role: goes into each rollout server actor's runtime_env."""
        return self.env("rollout")

    def to_json(self, applied: list[str] | None = None) -> str:
        data = {"version": 1, **{role: self.env(role) for role in ROLES}}
        if self.host_cpu:
            data["host_cpu"] = self.host_cpu
        if applied is not None:
            data["applied"] = sorted(applied)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def as_dict(self) -> dict[str, Any]:
        return {
            "settings": {role: {k: asdict(s) for k, s in self.settings[role].items()} for role in ROLES},
            "warnings": list(self.warnings),
            "host_cpu": self.host_cpu,
        }

    def lines(self) -> list[str]:
        """``VAR=value  # [roles] reason``: one line per variable, two if the roles differ."""
        out = []
        names = list(dict.fromkeys([*self.settings["train"], *self.settings["rollout"]]))
        order = {v["name"]: i for i, v in enumerate(load_table()["variables"])}
        names.sort(key=lambda n: order.get(n, len(order)))
        for name in names:
            per_role = {role: self.settings[role][name] for role in ROLES if name in self.settings[role]}
            values = {s.value for s in per_role.values()}
            reasons = {s.reason for s in per_role.values()}
            if len(values) == 1 and len(reasons) == 1:
                setting = next(iter(per_role.values()))
                out.append(f"{name}={shlex.quote(setting.value)}  # [{', '.join(per_role)}] {setting.reason}")
            else:
                for role, setting in per_role.items():
                    out.append(f"{name}={shlex.quote(setting.value)}  # [{role}] {setting.reason}")
        for key, setting in self.additional_config.items():
            out.append(f"# additional_config.{key}={setting.value}  # [rollout engine argument] {setting.reason}")
        out += [f"# note: {note}" for note in self.notes]
        return out


# --------------------------------------------------------------------------------------------
# The table


@functools.cache
def load_table() -> dict:
    """Parse and sanity-check ``profile.yaml`` (once per process)."""
    with open(TABLE_PATH) as f:
        table = yaml.safe_load(f)
    names = [v["name"] for v in table["variables"]]
    if len(names) != len(set(names)):
        raise ValueError(f"{TABLE_PATH}: duplicate variable names")
    for var in table["variables"]:
        bad = set(var["roles"]) - set(ROLES)
        if bad:
            raise ValueError(f"{TABLE_PATH}: {var['name']}: unknown role(s) {sorted(bad)}; roles are {ROLES}")
    return table


def table_variables() -> dict[str, dict]:
    return {v["name"]: v for v in load_table()["variables"]}


def select(config, key: str, default=None):
    """``config[key]`` for a DictConfig or a plain mapping (``default`` where a part is missing)."""
    if isinstance(config, DictConfig):
        return OmegaConf.select(config, key, default=default, throw_on_missing=False)
    node = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def render(text: str, facts: Mapping[str, Any]) -> str:
    """A table reason with ``{fact}`` placeholders filled in (unknown names stay as written)."""
    return re.sub(r"\{([a-z_.]+)\}", lambda m: str(facts[m[1]]) if m[1] in facts else m[0], text)


def _equal(actual, expected) -> bool:
    if isinstance(actual, str) and isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return actual == str(expected)
    return actual == expected


def holds(condition: Mapping | None, facts: Mapping[str, Any]) -> bool:
    """Whether every ``fact: expectation`` of a table condition holds."""
    for key, expected in (condition or {}).items():
        actual = facts.get(key)
        if isinstance(expected, Mapping):
            ((op, arg),) = expected.items()
            if op == "in":
                ok = any(_equal(actual, a) for a in arg)
            elif op == "not_in":
                ok = not any(_equal(actual, a) for a in arg)
            elif op == "ne":
                ok = actual is not None and not _equal(actual, arg)
            elif op == "gt":
                ok = actual is not None and actual > arg
            elif op == "lt":
                ok = actual is not None and actual < arg
            else:
                raise ValueError(f"{TABLE_PATH}: unknown condition operator {op!r} for {key}")
        else:
            ok = _equal(actual, expected)
        if not ok:
            return False
    return True
