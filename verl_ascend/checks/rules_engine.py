"""Rules on the rollout engine a run names: set, installed in this Python, and given only arguments it takes.

Upstream verl 0.9.1 first touches the engine inside the rollout server actor, after Ray, TransferQueue
and the worker group have started, so each of these fails minutes in, in a multi-screen traceback
from a Ray actor. Checked here, in the driver, before anything starts:

- ``rollout_name_unset``: ``actor_rollout_ref.rollout.name`` is mandatory (``???`` in upstream's
  ``ppo_trainer``); upstream's own ``main_ppo`` does not check it before Ray.
- ``rollout_engine_missing``: ``rollout.name`` names an engine (vllm, sglang, trtllm) whose package
  this interpreter cannot find (``importlib.util.find_spec``; nothing is imported). A launch input (the
  entry point and upstream's driver check it; the doctor and ``DRY_RUN=1`` may run on another machine).
- ``engine_kwargs_unknown``: a key under ``rollout.engine_kwargs.vllm`` that ``vllm serve`` does not
  take. Upstream's vLLM server passes each key as ``--<key>`` to vLLM's argument parser inside the
  actor, which then exits with "unrecognized arguments". The accepted names are read from the
  installed vLLM's source with ``ast`` (the fields of ``EngineArgs``/``AsyncEngineArgs`` and of the
  OpenAI frontend's ``FrontendArgs``, and the options ``make_arg_parser`` adds itself): importing vLLM
  in the driver would load its platform and plugins (the NPU's, on Ascend).
- ``engine_kwargs_type``: a value under ``rollout.engine_kwargs.vllm`` that the declared type of its
  ``EngineArgs`` field does not take (``max_num_batched_tokens=abc``): upstream passes it as
  ``--<key> <value>`` and vLLM's argument parser stops the rollout server, inside Ray. The types are
  ``dataclasses.fields`` of the installed vLLM's ``AsyncEngineArgs``: resolved only by importing
  ``vllm.engine.arg_utils``, which is done only when such a value is given (and loads vLLM's platform in
  this process; the option names above need no import). A type it cannot judge (a config class, an enum)
  is left to vLLM; where vLLM cannot be imported, a note says the values were not checked.

``driver_refusal(config)`` is the same checks for the backends' hook in upstream's ``main_ppo``
driver (seam rows ``cpu_auto_set_device`` and ``ascend_auto_set_device``).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib.util
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from verl_ascend.checks.findings import ERROR, INFO, Finding
from verl_ascend.checks.pipeline import INPUTS, tag
from verl_ascend.checks.view import ROLLOUT, ConfigView

NAME_KEY = f"{ROLLOUT}.name"
VLLM_KWARGS = f"{ROLLOUT}.engine_kwargs.vllm"
# rollout.name -> the Python package upstream's server of that engine imports.
ENGINE_PACKAGES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}
# (module, classes whose annotated fields are `vllm serve` options, function whose "--flags" are too)
VLLM_ARG_SOURCES = (
    ("vllm.engine.arg_utils", ("EngineArgs", "AsyncEngineArgs"), None),
    ("vllm.entrypoints.openai.cli_args", ("BaseFrontendArgs", "FrontendArgs"), "make_arg_parser"),
)


def rollout_names() -> list[str]:
    """Engine names upstream's replica registry knows (plugins such as verl.cpu's ``hf`` included).

    Read from the registry's private dict (seam ``recipe_rollout_engine_names``): upstream lists them nowhere
    else, and its ``get()`` raises inside a Ray actor after start-up; the checks refuse an unknown name before
    Ray. Goes when upstream has a public ``RolloutReplicaRegistry.names()``.
    """
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    return sorted(RolloutReplicaRegistry._registry)


def engine_installed(package: str) -> bool:
    """Whether this interpreter can import ``package`` (found on its path; not imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken half-installed package
        return False


def _source_path(module: str) -> Optional[Path]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") and Path(origin).is_file() else None


def _option_names(tree: ast.Module, classes: tuple[str, ...], function: Optional[str]) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in classes:
            names |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        elif isinstance(node, ast.FunctionDef) and node.name == function:
            names |= {
                c.value[2:].replace("-", "_") for c in ast.walk(node)
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith("--")
            }
    return names


@functools.lru_cache(maxsize=1)
def vllm_serve_options() -> Optional[frozenset[str]]:
    """Every option name ``vllm serve`` of the installed vLLM takes (underscored), None if unreadable."""
    names: set[str] = set()
    for module, classes, function in VLLM_ARG_SOURCES:
        path = _source_path(module)
        if path is None:
            return None
        try:
            names |= _option_names(ast.parse(path.read_text(encoding="utf-8")), classes, function)
        except (OSError, SyntaxError, UnicodeDecodeError):
            return None
    return frozenset(n for n in names if not n.startswith("_")) or None


def _value(config, key: str):
    """``(value, state)``: state 'missing' for ``???``, 'absent' when the key is not there, else 'set'."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(config, parent, default=None, throw_on_resolution_failure=False)
    if not isinstance(node, DictConfig) or leaf not in node.keys():  # (``in node`` is False for ``???``)
        return None, "absent"
    if OmegaConf.is_missing(node, leaf):
        return None, "missing"
    return OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False), "set"


def name_problems(config) -> list[Finding]:
    """``rollout.name`` unset (mandatory in upstream's config)."""
    name, state = _value(config, NAME_KEY)
    if state == "missing" or (state == "set" and name in (None, "")):
        return [Finding(
            "rollout_name_unset", ERROR,
            f"{NAME_KEY} is not set (mandatory, '???' in upstream's config); accepted: one of {rollout_names()} "
            f"(upstream's rollout registry), e.g. {NAME_KEY}=vllm",
            (NAME_KEY,),
        )]
    return []


def installed_problems(config) -> list[Finding]:
    """``rollout.name`` naming an engine whose package this interpreter cannot find."""
    name, _ = _value(config, NAME_KEY)
    package = ENGINE_PACKAGES.get(name) if isinstance(name, str) else None
    if package is None or engine_installed(package):
        return []
    installed = [n for n in rollout_names() if n not in ENGINE_PACKAGES or engine_installed(ENGINE_PACKAGES[n])]
    return [Finding(
        "rollout_engine_missing", ERROR,
        f"{NAME_KEY}={name}, but this Python ({sys.executable}) cannot import '{package}': the {name} engine is not "
        f"installed; accepted: an engine installed here, one of {installed}, or install {name} into this environment",
        (NAME_KEY,),
    )]


def engine_kwargs_problems(config) -> list[Finding]:
    """Keys under ``rollout.engine_kwargs.vllm`` that the installed ``vllm serve`` does not take."""
    name, _ = _value(config, NAME_KEY)
    kwargs, state = _value(config, VLLM_KWARGS)
    if name != "vllm" or state != "set" or not isinstance(kwargs, DictConfig) or not len(kwargs):
        return []
    if not engine_installed("vllm"):
        return []  # rollout_engine_missing says so
    options = vllm_serve_options()
    if options is None:
        return [Finding("engine_kwargs_unchecked", INFO,
                        f"{VLLM_KWARGS}: the installed vLLM's option names could not be read from its source; not checked")]
    found = []
    for key in kwargs:
        if str(key).replace("-", "_") in options:
            found += type_problems(str(key), kwargs[key], found)
            continue
        close = difflib.get_close_matches(str(key).replace("-", "_"), sorted(options), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        found.append(Finding(
            "engine_kwargs_unknown", ERROR,
            f"{VLLM_KWARGS}.{key}: not an option of the installed vLLM's `vllm serve` (upstream passes it as "
            f"--{key}; vLLM would stop the rollout server with 'unrecognized arguments'); {hint}accepted: one of the "
            f"{len(options)} fields of vLLM's EngineArgs/AsyncEngineArgs/FrontendArgs (vllm serve --help)",
            (f"{VLLM_KWARGS}.{key}", NAME_KEY),
        ))
    return found


@functools.lru_cache(maxsize=1)
def vllm_arg_types() -> tuple[Optional[dict[str, Any]], str]:
    """(field -> declared type of the installed vLLM's ``AsyncEngineArgs``, "") or (None, why it cannot be read)."""
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
    except Exception as exc:  # noqa: BLE001 -- a broken or absent vLLM: the values go unchecked, with a note
        return None, f"importing vllm.engine.arg_utils failed ({type(exc).__name__}: {exc})"
    return {f.name: f.type for f in dataclasses.fields(AsyncEngineArgs)}, ""


def value_fits(kind: Any, value: Any) -> Optional[bool]:
    """Whether vLLM's parser takes ``value`` for a field declared ``kind`` as upstream passes it on
    (``build_cli_args_from_config``: true -> a bare flag, a list -> several values, a mapping -> JSON);
    None where only vLLM can tell (a config class, an enum, a callable)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if value is None or kind is Any:
        return True  # upstream drops None
    if origin in (typing.Union, types.UnionType):
        verdicts = [value_fits(k, value) for k in args]
        return True if True in verdicts else None if None in verdicts else False
    if origin is typing.Literal:
        return value in args or str(value) in {str(a) for a in args}
    if kind is bool or kind is type(None):
        return isinstance(value, bool) if kind is bool else False
    if isinstance(value, bool):
        return False if kind in (int, float, str) or origin in (list, set, tuple, dict) else None
    if kind in (int, float):
        return _parses(kind, value)
    if kind is str:
        return isinstance(value, (str, int, float, Mapping))
    if origin in (list, set, tuple) or kind in (list, set, tuple):
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        verdicts = [value_fits(args[0], item) for item in items] if args else [True]
        return False if False in verdicts else None if None in verdicts else True
    if origin is dict or kind is dict:
        return isinstance(value, (Mapping, str))
    return None


def _parses(kind: type, value: Any) -> bool:
    if isinstance(value, Mapping) or isinstance(value, (list, tuple)):
        return False
    try:
        kind(str(value))  # what vLLM's parser does with the text upstream passes
        return True
    except ValueError:
        return False


def describe(kind: Any) -> str:
    """A declared type in words, for the refusal's "accepted"."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(k) for k in args)
    if origin is typing.Literal:
        return f"one of {list(args)}"
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    if kind in words:
        return words[kind]
    if origin in (list, set, tuple):
        return f"a list of {describe(args[0])}" if args else "a list"
    if origin is dict or kind is dict:
        return "a mapping (or its JSON text)"
    return getattr(kind, "__name__", str(kind))


def type_problems(key: str, value: Any, found: list[Finding]) -> list[Finding]:
    """``value`` of the known option ``key`` against the type its ``EngineArgs`` field declares."""
    declared, why = vllm_arg_types()
    if declared is None:
        if any(f.rule == "engine_kwargs_unchecked" for f in found):
            return []
        return [Finding("engine_kwargs_unchecked", INFO, f"{VLLM_KWARGS}: values not type-checked: {why}")]
    kind = declared.get(key.replace("-", "_"))
    value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    if kind is None or value_fits(kind, value) is not False:
        return []
    return [Finding(
        "engine_kwargs_type", ERROR,
        f"{VLLM_KWARGS}.{key}={value!r}: the installed vLLM declares EngineArgs.{key.replace('-', '_')}: {kind}; "
        f"upstream passes it on as --{key} (verl/workers/rollout/vllm_rollout/vllm_async_server.py) and vLLM's "
        "argument parser would stop the rollout server inside Ray",
        (f"{VLLM_KWARGS}.{key}",), accepted=describe(kind),
    )]


def rollout_engine(view: ConfigView) -> Iterator[Finding]:
    """The name set, and the engine arguments ones the installed vLLM takes (what the doctor can say anywhere)."""
    yield from name_problems(view.config)
    yield from engine_kwargs_problems(view.config)


def rollout_engine_installed(view: ConfigView) -> Iterator[Finding]:
    """The engine importable where the run starts: a launch input (the doctor may run on another machine)."""
    yield from installed_problems(view.config)


def driver_refusal(config) -> Optional[str]:
    """One message naming every engine problem of ``config`` (for upstream's driver), or None."""
    found = name_problems(config) + installed_problems(config) + engine_kwargs_problems(config)
    found = [f for f in found if f.severity == ERROR]
    return "\n  ".join(f.message for f in found) or None


def refuse_in_driver(config, prefix: str) -> None:
    """In upstream's ``main_ppo`` driver: print the engine problems and exit 2 before Ray, if any."""
    message = driver_refusal(config)
    if message:
        print(f"{prefix} error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(2)


tag(rollout_engine, launch=True)
tag(rollout_engine_installed, stage=INPUTS, launch=True)

RULES = (rollout_engine, rollout_engine_installed)
