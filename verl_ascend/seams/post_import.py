"""Run a callback right after a named module is imported, without importing it ourselves.

Plugins are loaded at every ``import verl``; importing the heavy modules they extend (the
FSDP engine, the rollout registries) at that point would add seconds to every process.
Instead a tiny ``sys.meta_path`` finder wraps the loader of the target module, so the
callback runs once, after the module body executed and before anyone ``from``-imports a
name out of it. If the module is already imported, the callback runs at once.

``while_importing`` is the rarer sibling: a context manager entered around the module body,
for a module that decides something irrevocably *while* it is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from contextlib import ExitStack
from typing import Callable, ContextManager

_callbacks: dict[str, list[Callable]] = {}
_contexts: dict[str, list[Callable[[], ContextManager]]] = {}
_lock = threading.Lock()


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _callbacks and fullname not in _contexts:
            return None
        # Ask the remaining finders for the real spec, then wrap its loader.
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _WrappedLoader(spec.loader, fullname)
                return spec
        return None


class _WrappedLoader(importlib.abc.Loader):
    def __init__(self, inner, fullname):
        self._inner = inner
        self._fullname = fullname

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        with _lock:
            contexts = _contexts.pop(self._fullname, [])
        with ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context())
            self._inner.exec_module(module)
        _run(self._fullname, module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


_finder = _PostImportFinder()


def _run(fullname: str, module) -> None:
    with _lock:
        callbacks = _callbacks.pop(fullname, [])
    for callback in callbacks:
        callback(module)


def when_imported(module_name: str, callback: Callable) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported (now, if it already is)."""
    if module_name in sys.modules:
        callback(sys.modules[module_name])
        return
    with _lock:
        _callbacks.setdefault(module_name, []).append(callback)
        _arm()


def while_importing(module_name: str, context: Callable[[], ContextManager]) -> bool:
    """Run the body of ``module_name`` inside ``context()`` when it is first imported.

    Returns False (and does nothing) if the module is already imported: too late.
    """
    if module_name in sys.modules:
        return False
    with _lock:
        _contexts.setdefault(module_name, []).append(context)
        _arm()
    return True


def _arm() -> None:
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def main_module() -> str | None:
    """NAME of ``python -m NAME`` (``None`` for scripts, pytest, Ray workers' own mains).

    Read from the original command line: plugins load while runpy imports NAME's parent
    package, before ``__main__`` becomes NAME. Backends arm driver-only hooks by it."""
    argv = list(getattr(sys, "orig_argv", []))
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
