"""The seam mechanism: the row type, removal conditions, fingerprints, stages, the installer, the one index.

Upstream verl, transformers, vLLM (and torch) are pinned dependencies. Wherever this
distribution depends on them beyond their public API, the contact is a :class:`Seam` row --
nowhere else -- with what a machine checks: its target, the test that guards it, the source
fingerprint of every upstream member it touches and when it can go (an executable condition,
``removable_if``). Why it exists, how it is switched on and the upstream change that would make it
unnecessary are said once, in the docstring of the code the row names (``code``), which names the
row's id.

Rows live next to the code they describe: each home declares a tuple of its rows (``SEAMS`` in
``verl/ascend/seams.py``, ``verl/cpu/seams.py``, ``recipe/dapo_ascend/seams.py``,
``verl_ascend/run/seams.py``) and registers it in the entry-point group ``verl_ascend.seams``
(setup.py). :func:`assembled` (``SEAMS``, ``SEAMS_BY_ID``) joins them into the one index that
:func:`install`, ``verl-ascend seams`` and the completeness scan read; this module
holds no row.

Kinds of rows:

* ``runtime-patch``: we rebind a function/class/method of an upstream module at run time;
* ``private-override``: a class of ours subclasses an upstream class (or is mixed into one)
  and overrides or calls its private (``_``) members;
* ``private-registry``: we read or write an upstream private registry, dict or attribute;
* ``instance-rebind``: we rebind attributes on an upstream object *instance* (or copy its
  ``__dict__`` into an instance of our subclass), or write upstream-read config to steer it;
* ``module-substitution``: we put modules of our own into ``sys.modules`` / onto ``torch``.

Stages (when a row is installed, always by :func:`install`): ``plugin`` (every process, at
``import verl``, through the backends' ``verl.plugins`` entry points), ``worker`` (in a Ray worker
when upstream builds the model), ``trainer`` (the TaskRunner/trainer process, when it builds its
run journal), ``vllm`` (every vLLM process, through the ``vllm.general_plugins`` entry point
:func:`install_vllm_stage`), ``driver`` (the recipe / main_ppo driver) and ``none`` (rows whose
"installation" is a subclass or a read). A row without an ``install`` path is switched on by the
code it names (a subclass, a component of the trainer) and has nothing to install.

Fingerprints: ``"module:qualname"`` -> sha256[:16] of the dedented source of that object;
``"module[:qualname]#needle"`` -> sha256[:16] of the lines of that source that contain
``needle`` (for instance attributes, module-level dicts and call sites, which have no source of
their own). ``tests/verl_ascend/seams/test_index.py`` checks every one of them and re-derives the set of
contacts from our code (:mod:`verl_ascend.seams.scan`), so a contact cannot be missing.
A mismatch means: re-read the new upstream code, re-verify the row, then update the fingerprint
in the row's home.

Extension points that upstream offers for this purpose (platform registry, the public
``register`` methods of the engine and rollout registries, entry points, ``register_trainer``)
are not contacts and are not listed.

This module imports no backend (``verl.ascend``, ``verl.cpu``) and no recipe: their rows arrive
through entry points and their installers through the rows' ``install`` dotted paths.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

logger = logging.getLogger("verl_ascend.seams")

KINDS = ("runtime-patch", "private-override", "private-registry", "instance-rebind", "module-substitution")
STAGES = ("plugin", "worker", "trainer", "vllm", "driver", "none")


# -- removal conditions (evaluated against the installed packages) ---------------------------------
def _resolve(spec: str):
    module_name, _, qualname = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def _source(spec: str) -> str:
    """Source of ``module:qualname``; of a plain ``module`` read from its file without importing it."""
    import inspect
    import textwrap

    if ":" not in spec:
        import importlib.util
        from pathlib import Path

        found = importlib.util.find_spec(spec)
        if found is None or not found.origin or not found.origin.endswith(".py"):
            raise ImportError(f"no Python source for module {spec}")
        return Path(found.origin).read_text()
    return textwrap.dedent(inspect.getsource(inspect.unwrap(_resolve(spec))))


@dataclass(frozen=True)
class HasAttr:
    """Met when ``module:qualname`` resolves (upstream exposes a public replacement)."""

    spec: str

    def check(self) -> tuple[bool, str]:
        try:
            _resolve(self.spec)
        except (ImportError, AttributeError):
            return False, f"{self.spec} does not exist"
        return True, f"{self.spec} exists"


@dataclass(frozen=True)
class SourceContains:
    """Met when the source of ``module[:qualname]`` contains ``text``."""

    spec: str
    text: str

    def check(self) -> tuple[bool, str]:
        try:
            found = self.text in _source(self.spec)
        except (ImportError, AttributeError, OSError, TypeError) as e:
            return False, f"{self.spec} unreadable ({type(e).__name__})"
        return found, f"{self.spec} {'contains' if found else 'lacks'} {self.text!r}"


@dataclass(frozen=True)
class SourceLacks:
    """Met when the source of ``module[:qualname]`` no longer contains ``text``."""

    spec: str
    text: str

    def check(self) -> tuple[bool, str]:
        met, why = SourceContains(self.spec, self.text).check()
        if "unreadable" in why:
            return False, why
        return not met, why


@dataclass(frozen=True)
class VersionSatisfies:
    """Met when the installed distribution ``dist`` satisfies ``specifier`` (PEP 440)."""

    dist: str
    specifier: str

    def check(self) -> tuple[bool, str]:
        from importlib.metadata import PackageNotFoundError, version

        from packaging.specifiers import SpecifierSet

        try:
            have = version(self.dist)
        except PackageNotFoundError:
            return False, f"{self.dist} not installed"
        met = SpecifierSet(self.specifier).contains(have, prereleases=True)
        return met, f"{self.dist} {have} {'satisfies' if met else 'does not satisfy'} {self.specifier}"


Condition = Union[HasAttr, SourceContains, SourceLacks, VersionSatisfies]


@dataclass(frozen=True)
class Seam:
    """One contact, as far as a machine checks it. Why it exists, how it is switched on and what upstream
    change would retire it are said in the docstring of the code it names (``code``), next to that code."""

    id: str
    target: str  # what is replaced, read or overridden, with the pinned version it was written against
    test: str  # pytest node id(s) that fail when the target changes
    code: str  # where the contact lives in this project; its docstring names the row's id and says why
    kind: str = "runtime-patch"
    stage: str = "none"
    install: Optional[str] = None  # "module:function" run by install(stage); None: nothing to install
    fingerprints: dict[str, str] = field(default_factory=dict)  # member spec -> sha256[:16]
    removable_if: tuple[Condition, ...] = ()  # any one met: the row can go
    covers: tuple[str, ...] = ()  # scanned contact names covered without a member of that name


def source_fingerprint(spec: str) -> str:
    """sha256[:16] of the source of ``"module:qualname"``, or of its lines containing ``needle`` for
    ``"module[:qualname]#needle"`` (our own wrappers are unwrapped)."""
    import hashlib

    spec, _, needle = spec.partition("#")
    source = _source(spec)
    if needle:
        source = "\n".join(line.strip() for line in source.splitlines() if needle in line)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def member_name(spec: str) -> str:
    """The contact name a fingerprint key stands for: its needle, else its last qualname part."""
    spec, _, needle = spec.partition("#")
    return (needle.split("(")[0] or spec.replace(":", ".")).rsplit(".", 1)[-1]


ENTRY_POINT_GROUP = "verl_ascend.seams"
REINSTALL = "the installed entry points may be older than setup.py: reinstall with `pip install --no-deps -e .`"


class SeamIndexError(ValueError):
    """A home's declaration of rows that cannot join the index (names the home or the row)."""


def assemble(points) -> tuple[Seam, ...]:
    """The one index from each home's declaration: entry points of :data:`ENTRY_POINT_GROUP`, each
    naming a tuple of :class:`Seam` rows, taken in the order of their names. A home that declares
    something else, a row with an unknown kind or stage, or an id two homes (or one home twice)
    declare is refused with :class:`SeamIndexError` naming the home and the row."""
    rows: list[Seam] = []
    home: dict[str, str] = {}
    for point in sorted(points, key=lambda p: p.name):
        where = f"entry point {point.name} = {point.value} (group {ENTRY_POINT_GROUP})"
        try:
            declared = point.load()
        except Exception as e:  # noqa: BLE001 -- any failure to load a home's rows: name the entry point
            raise SeamIndexError(f"{where}: cannot be loaded ({type(e).__name__}: {e}); {REINSTALL}") from e
        if not isinstance(declared, tuple) or not all(isinstance(s, Seam) for s in declared):
            raise SeamIndexError(f"{where}: expected a tuple of Seam rows, got {type(declared).__name__}")
        for seam in declared:
            if seam.id in home:
                raise SeamIndexError(f"seam row {seam.id!r} is declared twice, by {home[seam.id]} and by {point.value}")
            if seam.kind not in KINDS or seam.stage not in STAGES:
                raise SeamIndexError(
                    f"{where}: row {seam.id!r} has kind {seam.kind!r} and stage {seam.stage!r}; "
                    f"kinds are {KINDS}, stages {STAGES}"
                )
            home[seam.id] = point.value
            rows.append(seam)
    return tuple(rows)


_index: Optional[tuple[Seam, ...]] = None


def assembled() -> tuple[Seam, ...]:
    """Every home's rows, assembled once per process from the installed entry points."""
    global _index
    if _index is None:
        from importlib.metadata import entry_points

        rows = assemble(entry_points(group=ENTRY_POINT_GROUP))
        if not rows:  # metadata older than setup.py: the backends' patches would silently not install
            raise SeamIndexError(f"no seam rows in the entry-point group {ENTRY_POINT_GROUP}; {REINSTALL}")
        _index = rows
    return _index


def __getattr__(name: str):
    """``SEAMS`` and ``SEAMS_BY_ID``, assembled on first use (importing this module stays cheap)."""
    if name == "SEAMS":
        return assembled()
    if name == "SEAMS_BY_ID":
        return {s.id: s for s in assembled()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_installed: dict[str, bool] = {}  # install path -> whether it acted (False: it declined), in order run


def install(stage: str, owner: Optional[str] = None, seams: Optional[tuple[Seam, ...]] = None) -> list[str]:
    """Install the rows of ``stage`` (only those whose ``install`` path is under ``owner``, if given).

    The only way a row is installed, for every stage: ``plugin`` by the backends' ``verl.plugins``
    entry points, ``vllm`` by :func:`install_vllm_stage` (a ``vllm.general_plugins`` entry point),
    ``trainer`` by the run journal the trainer builds. Each distinct ``install`` path
    ("module:function") is imported with importlib and called once per process, in index order;
    later calls are no-ops. Like entry points, a row names *what* to run as a string, so this
    package never imports a backend or the recipe by a static import. Returns the paths installed
    by this call; :func:`installed` lists all of them. ``seams`` replaces the index (tests).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {STAGES}")
    done = []
    for seam in assembled() if seams is None else seams:
        path = seam.install
        if seam.stage != stage or not path or path in _installed:
            continue
        if owner and not path.startswith(owner + ".") and not path.startswith(owner + ":"):
            continue
        module_name, _, func = path.partition(":")
        fn: Callable[[], object] = getattr(importlib.import_module(module_name), func)
        _installed[path] = fn() is not False  # an installer returning False declined (e.g. no emulator asked)
        done.append(path)
        logger.debug("installed %s (%s)", path, stage)
    return done


def install_vllm_stage() -> None:
    """``vllm.general_plugins`` entry point (vLLM calls it at the start of each of its processes):
    installs the ``vllm``-stage rows of every home."""
    install("vllm")


def installed() -> dict[str, list[str]]:
    """Row ids installed in this process, by install path (for status commands); installers that
    ran but declined (returned False) are left out."""
    return {path: [s.id for s in assembled() if s.install == path] for path, acted in _installed.items() if acted}


def status(seam: Seam) -> tuple[str, str]:
    """``("target-changed", which)`` if a fingerprint mismatches, ``("removable", why)`` if a
    ``removable_if`` condition is met, else ``("needed", "")``."""
    changed = []
    for spec, expected in seam.fingerprints.items():
        try:
            actual = source_fingerprint(spec)
        except Exception as e:  # noqa: BLE001 -- a target that is gone has changed
            actual = f"unresolvable ({type(e).__name__})"
        if actual != expected:
            changed.append(f"{spec} {expected} -> {actual}")
    if changed:
        return "target-changed", "; ".join(changed)
    for condition in seam.removable_if:
        met, why = condition.check()
        if met:
            return "removable", why
    return "needed", ""
