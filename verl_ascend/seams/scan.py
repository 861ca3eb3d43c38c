"""Re-derive this distribution's contacts with upstream code from its source, with ``ast``.

A *contact* is a name of someone else's code that ours depends on beyond its public API, or
state of someone else's that ours rebinds:

* ``override``: an underscore member (not dunder) that one of our classes defines or reads on
  ``self`` and that an upstream base class (or, for a mixin, the upstream base of the class it
  is mixed into) also has;
* ``private``: ``x._name`` / ``getattr(x, "_name")`` on an object that is not ``self`` where no
  code of ours defines ``_name``, and ``from <upstream> import _name``;
* ``rebind``: an attribute assigned a function defined in place (a closure or lambda), an
  attribute of an imported upstream module/class assigned, ``sys.modules[...]`` assigned, or
  ``obj.__dict__`` / ``obj.__class__`` of another object touched.

The scan imports upstream classes (never ours) to learn their members. ``tests/verl_ascend/seams`` fails
when a contact found here is not a member of a row of :mod:`verl_ascend.seams.index`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path

OURS = ("verl.ascend", "verl.cpu", "recipe", "verl_ascend", "tests", "benchmarks")
UPSTREAM = ("verl", "transformers", "vllm", "vllm_ascend", "torch", "torch_npu")
PRODUCT_DIRS = ("verl/ascend", "verl/cpu", "recipe/dapo_ascend", "verl_ascend")


@dataclass(frozen=True, order=True)
class Contact:
    file: str
    line: int
    name: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.name} ({self.rule})"


def _is_ours(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in OURS)


def _is_upstream(module: str) -> bool:
    return not _is_ours(module) and any(module == p or module.startswith(p + ".") for p in UPSTREAM)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module, modname: str) -> dict[str, tuple[str, str | None]]:
    """Local name -> (module, attribute or None) for every import in ``tree``."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[(a.asname or a.name).split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = modname.split(".")[: -node.level] if not modname.endswith("__init__") else modname.split(".")
                base = ".".join([*pkg, *([node.module] if node.module else [])])
            for a in node.names:
                out[a.asname or a.name] = (base, a.name)
    return out


def upstream_members(module: str, qualname: str) -> set[str]:
    """Names an upstream class (and its bases, ``object`` excluded) defines or uses on ``self``."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    names: set[str] = set()
    for cls in getattr(obj, "__mro__", (obj,)):
        if cls is object:
            continue
        names.update(vars(cls))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def scan(files: dict[str, str], members=upstream_members) -> list[Contact]:
    """Contacts in ``files`` (repo-relative path -> source). ``members`` resolves an upstream class."""
    trees = {path: ast.parse(src) for path, src in files.items()}
    defined: set[str] = set()  # private names some code of ours defines
    classes: dict[tuple[str, str], tuple[str, ast.ClassDef]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif (  # our own attributes: stored on self (or on the instance an adopt() builds)
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "new")
            ):
                defined.add(node.attr)
            if isinstance(node, ast.ClassDef):
                classes[(module_name(path), node.name)] = (path, node)
    # Which upstream classes stand behind each class of ours (mixins inherit their host's).
    behind: dict[tuple[str, str], set[tuple[str, str]]] = {key: set() for key in classes}
    ours_bases: dict[tuple[str, str], list[tuple[str, str]]] = {key: [] for key in classes}
    for key, (path, node) in classes.items():
        imports = _imports(trees[path], key[0])
        for base in node.bases:
            if isinstance(base, ast.Name):
                mod, attr = imports.get(base.id, (key[0], base.id))
                target = (mod, attr or base.id)
                if _is_upstream(mod):
                    behind[key].add(target)
                elif target in classes:
                    ours_bases[key].append(target)
    changed = True
    while changed:
        changed = False
        for key, bases in ours_bases.items():
            for base in bases:
                for src, dst in ((key, base), (base, key)):
                    if not behind[src] <= behind[dst]:
                        behind[dst] |= behind[src]
                        changed = True
    found: set[Contact] = set()
    for key, ups in behind.items():
        if not ups:
            continue
        path, node = classes[key]
        names: set[str] = set()
        for up in ups:
            try:
                names |= members(*up)
            except Exception:  # noqa: BLE001 -- an upstream that does not import: nothing to compare
                continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub in node.body:
                if _private(sub.name) and sub.name in names:
                    found.add(Contact(path, sub.lineno, sub.name, "override"))
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in ("self", "new"):
                if _private(sub.attr) and sub.attr in names:
                    found.add(Contact(path, sub.lineno, sub.attr, "override"))
    for path, tree in trees.items():
        imports = _imports(tree, module_name(path))
        local_funcs = {
            n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.col_offset > 0
        }
        for node in ast.walk(tree):
            first = node.names[0] if isinstance(node, ast.ImportFrom) else None
            if first is not None and _is_upstream(imports.get(first.asname or first.name, ("",))[0]):
                for a in node.names:
                    if _private(a.name):
                        found.add(Contact(path, node.lineno, a.name, "private"))
            attr, obj = None, None
            if isinstance(node, ast.Attribute):
                attr, obj = node.attr, node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                attr, obj = node.args[1].value, node.args[0]
            if attr is not None:
                is_self = isinstance(obj, ast.Name) and obj.id in ("self", "cls")
                if _private(attr) and not is_self and attr not in defined:
                    found.add(Contact(path, node.lineno, attr, "private"))
                if attr in ("__dict__", "__class__") and not is_self and not isinstance(obj, ast.Call):
                    found.add(Contact(path, node.lineno, attr, "rebind"))
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules":
                        found.add(Contact(path, node.lineno, "sys.modules", "rebind"))
                    if not isinstance(t, ast.Attribute):
                        continue
                    root = t
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if isinstance(root, ast.Name) and root.id in ("self", "cls"):
                        continue
                    value = node.value
                    closure = isinstance(value, ast.Lambda) or (isinstance(value, ast.Name) and value.id in local_funcs)
                    upstream_root = isinstance(root, ast.Name) and _is_upstream(imports.get(root.id, ("",))[0])
                    if closure or upstream_root:
                        found.add(Contact(path, node.lineno, t.attr, "rebind"))
    return sorted(found)


def uncovered(contacts: list[Contact], seams) -> list[Contact]:
    """The contacts no row of ``seams`` names (a fingerprinted member or a ``covers`` entry)."""
    from verl_ascend.seams.index import member_name

    names = {member_name(spec) for seam in seams for spec in seam.fingerprints}
    names |= {name for seam in seams for name in seam.covers}
    return [c for c in contacts if c.name not in names]


def installer_calls(files: dict[str, str], paths) -> list[Contact]:
    """Calls of a row's installer (``"module:function"`` in ``paths``) in ``files``: only
    :func:`verl_ascend.seams.index.install` may call one, so that every stage is installed the same way.
    Seen: ``function()`` after ``from module import function [as f]``, ``m.function()`` after
    ``import module as m`` or ``from package import module [as m]``, and ``function()`` inside module."""
    wanted = {tuple(path.split(":", 1)) for path in paths}
    found: set[Contact] = set()
    for path, src in files.items():
        tree = ast.parse(src)
        here = module_name(path)
        bound = {}  # local name -> (module, function) for a name bound to an installer
        modules = {}  # local name -> module, for a name bound to a module that has installers
        for local, (mod, attr) in _imports(tree, here).items():
            if attr is not None and (mod, attr) in wanted:
                bound[local] = (mod, attr)
            full = f"{mod}.{attr}" if attr else mod
            if any(full == m for m, _f in wanted):
                modules[local] = full
        bound.update({func: (mod, func) for mod, func in wanted if mod == here})
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in bound:
                found.add(Contact(path, node.lineno, ":".join(bound[f.id]), "installer-call"))
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if (modules.get(f.value.id), f.attr) in wanted:
                    found.add(Contact(path, node.lineno, f"{modules[f.value.id]}:{f.attr}", "installer-call"))
    return sorted(found)


def product_files(root: Path) -> dict[str, str]:
    out = {}
    for d in PRODUCT_DIRS:
        for p in sorted((root / d).rglob("*.py")):
            out[p.relative_to(root).as_posix()] = p.read_text()
    return out
