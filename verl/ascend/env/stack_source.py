"""Read a vLLM / vllm-ascend release's switch surface from its source files, without importing it.

Shared by ``scripts/ascend_stack_snapshot.py`` (released source archives -> committed snapshots)
and :mod:`verl.ascend.env.stack` (the installed package's source, on an Ascend host), so the snapshot
and the live check read the same things the same way:

- ``env_vars``: keys of vLLM's ``environment_variables`` / vllm-ascend's ``env_variables`` table;
- ``additional_config_keys`` (vllm-ascend): top-level keys read from ``additional_config``
  (``.get("k")``, ``"k" in``, ``["k"]``, ``_get_config_value(..., additional_config, "k", ...)``);
- ``env_fallbacks`` (vllm-ascend): deprecated variable -> the ``additional_config`` key that wins;
- ``requirements`` (vllm-ascend): the release's version pins (``requirements.txt`` or METADATA), so a
  declared target can be checked against verl's own requirements;
- ``cann`` / ``cann_image`` (vllm-ascend): the CANN version of the image its Dockerfile builds on;
- ``weight_sync`` (vllm-ascend): the HCCL communicator upstream's weight-sync engine builds on NPU
  (``verl.utils.distributed.stateless_init_process_group`` imports ``PyHcclCommunicator`` from
  ``vllm_ascend.distributed.device_communicators.pyhccl``; ``HCCLCheckpointEngine`` calls its methods):
  the module, the class, its public methods and constructor parameters.
"""

from __future__ import annotations

import ast
import re
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

ENV_MODULES = {"vllm": ("vllm/envs.py", "environment_variables"), "vllm-ascend": ("vllm_ascend/envs.py", "env_variables")}
CONFIG_PACKAGE = {"vllm-ascend": "vllm_ascend/"}
# Non-Python files a snapshot also reads: the release's runtime pins and the CANN image it is built on.
RELEASE_FILES = ("requirements.txt", "Dockerfile")
_CANN_IMAGE = re.compile(r"^FROM\s+(\S*/cann:(\d+(?:\.[0-9A-Za-z]+)+)-\S*)", re.M)


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


# ``_get_config_value(additional_config, config_key, env_key, env_value)``: vllm-ascend's helper
# (AscendConfig) as of v0.23.0; used when the defining class is not in the files read.
_DEFAULT_SIGNATURE = ("additional_config", "config_key", "env_key", "env_value")
_READER = "_get_config_value"


def reader_signatures(files: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """class name -> parameter names of its ``_get_config_value`` (without self/cls).

    Why: the helper's signature differs per class and release (v0.25.1rc1's SchedulerConfig takes
    ``(scheduler_config, additional_config, config_key, default, env_key)``), so the key and the
    env fallback of a call are read by parameter name, not by position.
    """
    found: dict[str, tuple[str, ...]] = {}
    for text in files.values():
        if _READER not in text:
            continue
        for cls in ast.walk(ast.parse(text)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == _READER:
                    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                    found[cls.name] = tuple(n for n in names if n not in ("self", "cls"))
    return found


def _bind(call: ast.Call, params: tuple[str, ...]) -> dict[str, ast.AST]:
    bound = dict(zip(params, call.args))
    bound.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
    return bound


def _reader_params(call: ast.Call, owner: str | None, signatures: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    target = call.func.value
    name = owner if isinstance(target, ast.Name) and target.id in ("self", "cls") else ast.unparse(target)
    return signatures.get(name, _DEFAULT_SIGNATURE)


def _reader_calls(tree: ast.AST):
    """(call, enclosing class name or None) for every ``<x>._get_config_value(...)`` call."""
    stack = [(tree, None)]
    while stack:
        node, owner = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.ClassDef) else owner
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == _READER:
                yield child, owner
            stack.append((child, inner))


def additional_config_reads(
    source: str, signatures: dict[str, tuple[str, ...]] | None = None
) -> tuple[set[str], dict[str, str]]:
    """Top-level ``additional_config`` keys read in one module, and ENV -> key fallback pairs."""
    signatures = signatures or {}
    keys: set[str] = set()
    fallbacks: dict[str, str] = {}
    tree = ast.parse(source)
    for call, owner in _reader_calls(tree):
        bound = _bind(call, _reader_params(call, owner, signatures))
        key = _str(bound.get("config_key"))
        if key and "additional_config" in bound and _is_additional_config(bound["additional_config"]):
            keys.add(key)
            env = _str(bound.get("env_key"))
            if env and env.isupper():
                fallbacks[env] = key
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and _is_additional_config(node.func.value) and node.args and _str(node.args[0]):
                keys.add(_str(node.args[0]))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if _is_additional_config(node.comparators[0]) and _str(node.left):
                keys.add(_str(node.left))
        elif isinstance(node, ast.Subscript) and _is_additional_config(node.value) and _str(node.slice):
            keys.add(_str(node.slice))
    return keys, fallbacks


def pins(lines: list[str]) -> list[str]:
    """The requirements that carry a version specifier (``torch==2.10.0``), extras-only ones left out."""
    found = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.specifier and not (req.marker and "extra" in str(req.marker)):
            found.append(str(req))
    return found


def metadata_requires(metadata: str) -> list[str]:
    """``Requires-Dist`` lines of a wheel's / an installed distribution's METADATA."""
    return Parser().parsestr(metadata).get_all("Requires-Dist") or []


def release_facts(files: dict[str, str]) -> dict:
    """``requirements`` (the release's pins) and ``cann`` (the CANN of its image), where the files say.

    Pins: ``requirements.txt`` (what vllm-ascend's setup.py installs), else a wheel's METADATA.
    CANN: the ``FROM quay.io/ascend/cann:<version>-...`` line of the release's Dockerfile.
    """
    facts: dict = {}
    metadata = next((t for p, t in sorted(files.items()) if p.endswith(".dist-info/METADATA")), None)
    if "requirements.txt" in files:
        facts["requirements"] = pins(files["requirements.txt"].splitlines())
    elif metadata is not None:
        facts["requirements"] = pins(metadata_requires(metadata))
    match = _CANN_IMAGE.search(files.get("Dockerfile", ""))
    if match:
        facts["cann"] = match[2]
        facts["cann_image"] = match[1]
    return facts


# package -> (file, class) of the communicator upstream's HCCL weight-sync engine uses on NPU.
WEIGHT_SYNC = {"vllm-ascend": ("vllm_ascend/distributed/device_communicators/pyhccl.py", "PyHcclCommunicator")}


def class_surface(source: str, cls: str) -> dict | None:
    """``{"methods": [...], "init_params": [...]}`` of class ``cls`` in ``source`` (None: no such class)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            methods = sorted(f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and not f.name.startswith("_"))
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            params = [a.arg for a in (init.args.posonlyargs + init.args.args + init.args.kwonlyargs)] if init else []
            return {"methods": methods, "init_params": [p for p in params if p != "self"]}
    return None


def weight_sync_surface(package: str, files: dict[str, str]) -> dict | None:
    """The ``weight_sync`` entry of a snapshot: where the communicator is, and what it offers (None: no such package)."""
    if package not in WEIGHT_SYNC:
        return None
    path, cls = WEIGHT_SYNC[package]
    module = path.removesuffix(".py").replace("/", ".")
    found = class_surface(files[path], cls) if path in files else None
    return {"module": module, "class": cls, **(found or {"missing": True})}


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
        signatures = reader_signatures({p: t for p, t in files.items() if p.startswith(prefix)})
        for path, text in sorted(files.items()):
            if path.startswith(prefix) and "additional_config" in text:
                found, pairs = additional_config_reads(text, signatures)
                keys |= found
                fallbacks.update(pairs)
        data["additional_config_keys"] = sorted(keys)
        data["env_fallbacks"] = dict(sorted(fallbacks.items()))
        data.update(release_facts(files))
    sync = weight_sync_surface(package, files)
    if sync is not None:
        data["weight_sync"] = sync
    return data


def read_surface(package: str, root: Path) -> dict:
    """The surface of the package installed (or unpacked) under ``root`` (the folder holding it)."""
    top = ENV_MODULES[package][0].split("/", 1)[0]
    paths = [*(root / top).rglob("*.py"), *root.glob(f"{top}-*.dist-info/METADATA")]
    files = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace") for p in paths}
    return snapshot(package, "installed", files, f"installed source under {root}")
