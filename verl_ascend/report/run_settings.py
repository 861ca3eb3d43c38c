"""What the run was asked to do: environment variables from the env profile it recorded and config
values from its composed Hydra config.

Why: "is mc2 active?" has two halves -- was it asked for (``VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE=1`` in
the rollout workers' environment) and did the kernel run (``MatmulAllReduce`` in the trace). The
first half lives in what the run recorded, not in the trace.

Accepted env profile (``env_profile.json`` / ``.yaml``): a mapping with an ``env`` mapping of
variables, and/or per-role mappings under ``roles`` (``{"roles": {"rollout": {"env": {...}}}}``),
and optionally a ``config`` mapping (nested or dotted keys). A flat mapping of UPPER_CASE variables
is read as ``env``. Run config: Hydra's ``.hydra/config.yaml`` (nested).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from verl_ascend.report.problems import InputFormatError, InputProblem

_MISSING = object()


def _load(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputFormatError(InputProblem(path, f"cannot read ({e.strerror or e})")) from None
    try:
        if path.endswith(".json"):
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise InputFormatError(InputProblem(path, f"not valid JSON ({e.msg}, column {e.colno})", line=e.lineno)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InputFormatError(InputProblem(path, f"not valid YAML ({getattr(e, 'problem', e)})",
                                            line=mark.line + 1 if mark else None)) from None


def _select(tree: Any, dotted: str) -> Any:
    if isinstance(tree, dict) and dotted in tree:
        return tree[dotted]
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


@dataclass
class RunSettings:
    env_by_role: dict[str, dict[str, str]] = field(default_factory=dict)  # role ("*" = all) -> env
    configs: list[Any] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)

    @property
    def has_env(self) -> bool:
        return any(self.env_by_role.values())

    @property
    def has_config(self) -> bool:
        return bool(self.configs)

    def env(self, name: str, role: Optional[str] = None) -> Optional[str]:
        """The variable's value for ``role`` (else any role); None when no profile sets it."""
        order = ([role] if role else []) + ["*"] + [r for r in self.env_by_role if r not in (role, "*")]
        for r in order:
            value = self.env_by_role.get(r, {}).get(name)
            if value is not None:
                return str(value)
        return None

    def config(self, dotted: str, default: Any = None) -> Any:
        for tree in self.configs:
            value = _select(tree, dotted)
            if value is not _MISSING:
                return value
        return default

    def add_env_profile(self, path: str) -> None:
        try:
            data = _load(path)
        except InputFormatError as e:
            self.problems.append(e.problem)
            return
        if not isinstance(data, dict):
            self.problems.append(InputProblem(path, f"top level is a {type(data).__name__}; expected a mapping with "
                                                    "'env' and/or 'roles'"))
            return
        self.sources.append(path)
        found = False
        if isinstance(data.get("env"), dict):
            self.env_by_role.setdefault("*", {}).update({str(k): v for k, v in data["env"].items()})
            found = True
        roles = data.get("roles")
        if isinstance(roles, dict):
            for role, spec in roles.items():
                env = spec.get("env") if isinstance(spec, dict) and isinstance(spec.get("env"), dict) else spec
                if isinstance(env, dict):
                    self.env_by_role.setdefault(str(role), {}).update({str(k): v for k, v in env.items()})
                    found = True
        if isinstance(data.get("config"), dict):
            self.configs.append(data["config"])
            found = True
        if not found and data and all(isinstance(k, str) and k.isupper() for k in data):
            self.env_by_role.setdefault("*", {}).update(data)
            found = True
        if not found:
            self.problems.append(InputProblem(path, "no 'env', 'roles' or 'config' mapping found; expected e.g. "
                                                    '{"env": {"TASK_QUEUE_ENABLE": "2"}}'))

    def add_run_config(self, path: str) -> None:
        try:
            data = _load(path)
        except InputFormatError as e:
            self.problems.append(e.problem)
            return
        if isinstance(data, dict):
            self.configs.append(data)
            self.sources.append(path)
        else:
            self.problems.append(InputProblem(path, "not a mapping; expected a composed Hydra config"))
