"""Which weight-sync engine names a ``custom_backend_module`` registers, read from its source.

Upstream imports ``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module`` in every trainer
and rollout worker (``import_external_libs``, ``verl/workers/engine_workers.py`` and
``verl/checkpoint_engine/base.py``) and then looks ``checkpoint_engine.backend`` up in
``CheckpointEngineRegistry``, inside Ray. A module registers its names with
``@CheckpointEngineRegistry.register(name)``; the name is read here with ``ast`` (a string, or a
module-level constant bound to one), so a backend name that neither upstream nor the module registers is
refused before Ray, not assumed fine because some module is set (``rules_async.checkpoint_engine_unknown``).
The module is found, not imported: importing an engine imports its transport.

A device's platform may name a module at launch, in some trainer modes, where the user named none (the
CPU platform names its gloo engine's in ``separate_async``: ``verl/cpu/config_defaults.py``). It declares
that here (:func:`register_launch_module`), so the doctor and ``DRY_RUN=1``, which do not apply the
platform's defaults, judge the same names the launch would.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

REGISTER = "CheckpointEngineRegistry.register"

# device -> (trainer modes, module the platform names in custom_backend_module there)
_LAUNCH_MODULES: dict[str, tuple[tuple[str, ...], str]] = {}


def register_launch_module(device: str, modes: tuple[str, ...], module: str) -> None:
    """A backend declares the engine module its platform names at launch on ``device`` in ``modes``."""
    _LAUNCH_MODULES[device] = (tuple(modes), module)


def launch_module(device: str, mode: str) -> str | None:
    """The module ``device``'s platform names at launch in ``mode`` when the user named none; None if none."""
    modes, module = _LAUNCH_MODULES.get(device, ((), ""))
    return module if mode in modes else None


def module_source(module: str) -> Path | None:
    """The ``.py`` file of ``module`` (its parent packages are imported to find it; it is not)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") and Path(origin).is_file() else None


def names_registered_in(tree: ast.Module) -> frozenset[str]:
    """Names given to ``CheckpointEngineRegistry.register`` by the class decorators of one module."""
    constants = {
        node.targets[0].id: node.value.value for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith(REGISTER) and deco.args):
                continue
            arg = deco.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
            elif isinstance(arg, ast.Name) and arg.id in constants:
                names.add(constants[arg.id])
    return frozenset(names)


@functools.lru_cache(maxsize=16)
def registered_names(module: str) -> frozenset[str] | None:
    """The engine names ``module`` registers; None when its source cannot be found or read."""
    path = module_source(module)
    if path is None:
        return None
    try:
        return names_registered_in(ast.parse(path.read_text(encoding="utf-8")))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
