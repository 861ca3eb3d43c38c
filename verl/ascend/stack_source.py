"""Read a vLLM / vllm-ascend release's switch surface from its source files, without importing it.

Shared by ``scripts/ascend_stack_snapshot.py`` (released source archives -> committed snapshots)
and :mod:`verl.ascend.stack` (the installed package's source, on an Ascend host), so the snapshot
and the live check read the same things the same way:

- ``env_vars``: keys of vLLM's ``environment_variables`` / vllm-ascend's ``env_variables`` table;
- ``additional_config_keys`` (vllm-ascend): top-level keys read from ``additional_config``
  (``.get("k")``, ``"k" in``, ``["k"]``, ``_get_config_value(..., additional_config, "k", ...)``);
- ``env_fallbacks`` (vllm-ascend): deprecated variable -> the ``additional_config`` key that wins.
"""

from __future__ import annotations

import ast
from pathlib import Path

ENV_MODULES = {"vllm": ("vllm/envs.py", "environment_variables"), "vllm-ascend": ("vllm_ascend/envs.py", "env_variables")}
CONFIG_PACKAGE = {"vllm-ascend": "vllm_ascend/"}


def env_table_keys(source: str, table: str) -> list[str]:
    """String keys of the dict literal assigned (or annotated-assigned) to ``table``."""
    for node in ast.walk(ast.parse(source)):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == table and isinstance(node.value, ast.Dict):
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    raise ValueError(f"no dict literal named {table!r} found; the release layout changed, update ENV_MODULES")


def _is_additional_config(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return text == "additional_config" or text.endswith(".additional_config")


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def additional_config_reads(source: str) -> tuple[set[str], dict[str, str]]:
    """Top-level ``additional_config`` keys read in one module, and ENV -> key fallback pairs."""
    keys: set[str] = set()
    fallbacks: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and _is_additional_config(node.func.value) and node.args and _str(node.args[0]):
                keys.add(_str(node.args[0]))
            elif node.func.attr == "_get_config_value":
                args = node.args
                for i, arg in enumerate(args[:-1]):
                    if _is_additional_config(arg) and _str(args[i + 1]):
                        keys.add(_str(args[i + 1]))
                        env = _str(args[i + 2]) if i + 2 < len(args) else None
                        if env and env.isupper():
                            fallbacks[env] = _str(args[i + 1])
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if _is_additional_config(node.comparators[0]) and _str(node.left):
                keys.add(_str(node.left))
        elif isinstance(node, ast.Subscript) and _is_additional_config(node.value) and _str(node.slice):
            keys.add(_str(node.slice))
    return keys, fallbacks


def snapshot(package: str, version: str, files: dict[str, str], provenance: str) -> dict:
    env_path, table = ENV_MODULES[package]
    if env_path not in files:
        raise ValueError(f"{env_path} not in the source; is this a {package} source archive?")
    data = {
        "package": package,
        "version": version,
        "source": provenance,
        "generated_by": "scripts/ascend_stack_snapshot.py",
        "env_vars": env_table_keys(files[env_path], table),
    }
    prefix = CONFIG_PACKAGE.get(package)
    if prefix:
        keys: set[str] = set()
        fallbacks: dict[str, str] = {}
        for path, text in sorted(files.items()):
            if path.startswith(prefix) and "additional_config" in text:
                found, pairs = additional_config_reads(text)
                keys |= found
                fallbacks.update(pairs)
        data["additional_config_keys"] = sorted(keys)
        data["env_fallbacks"] = dict(sorted(fallbacks.items()))
    return data



def read_surface(package: str, root: Path) -> dict:
    """The surface of the package installed (or unpacked) under ``root`` (the folder holding it)."""
    top = ENV_MODULES[package][0].split("/", 1)[0]
    files = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace")
             for p in (root / top).rglob("*.py")}
    return snapshot(package, "installed", files, f"installed source under {root}")
