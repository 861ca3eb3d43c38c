"""Which vLLM / vllm-ascend a job targets, and which switches that release defines.

Why: vllm-ascend renames and removes switches between releases (``VLLM_ASCEND_ENABLE_PREFETCH_MLP``
dropped by PR #7357; ``enable_matmul_allreduce``, i.e. mc2, removed by PR #12119, first in
v0.25.1rc1), and vLLM ignores unknown variables with a log line. So the env profile must pick each
switch's route per target release, and check every name it emits against that release.

The target release, in order: the config key ``ascend.stack.vllm_ascend`` / ``ascend.stack.vllm``
(a version string; ``auto`` = next source), the environment variable
``VERL_ASCEND_TARGET_VLLM_ASCEND`` / ``VERL_ASCEND_TARGET_VLLM``, the installed distribution, the
pinned release of ``requirements/npu.txt`` (:data:`PINNED`). A user can therefore declare the
target stack on a CPU machine without installing it.

The surface of a release (env-variable names and ``additional_config`` keys): read from the
installed package's source when that is the target, else from the committed snapshot in
``snapshots/`` (``scripts/ascend_stack_snapshot.py`` generates them from released source
archives). A version without its own snapshot borrows the newest snapshot not newer than it (the
*stand-in*, :attr:`Surface.stand_in`): a name the stand-in lacks is then *unknown* for that version
(a warning), not absent (an error), since the newer release may have added it.

The requirement pins of a release (its ``requirements.txt`` / METADATA, recorded in its snapshot or
in a ``<package>-<version>.pins.yaml``) are checked against the installed verl's own
``Requires-Dist`` (:func:`pin_conflicts`): vllm-ascend 0.24.0rc1 pins transformers 5.13.0 and
0.25.1rc1 / 0.26.0rc1 pin 5.14.1, which verl 0.9.1 (``<5.11``) cannot install next to.

``verl-ascend stack-gate`` is the install gate of an Ascend host (:mod:`verl.ascend.env.stack_gate`).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from verl.ascend.env.stack_source import read_surface
from verl.ascend.env.table import select

SNAPSHOT_DIR = Path(__file__).with_name("snapshots")
PACKAGES = {"vllm": "vllm", "vllm-ascend": "vllm_ascend"}  # distribution -> config/ module name
PINNED = {"vllm": "0.23.0", "vllm-ascend": "0.23.0"}  # requirements/npu.txt
CONFIG_KEY = "ascend.stack.{}"
ENV_KEY = {"vllm": "VERL_ASCEND_TARGET_VLLM", "vllm-ascend": "VERL_ASCEND_TARGET_VLLM_ASCEND"}


@dataclass(frozen=True)
class Surface:
    """What one release defines: env-variable names, ``additional_config`` keys, where that was read."""

    package: str
    version: str
    origin: str  # how the version was chosen: config key, env var, installed, pinned
    source: str  # where the names were read: installed source or snapshot file
    env_vars: frozenset[str]
    additional_config_keys: frozenset[str]
    env_fallbacks: Mapping[str, str]
    stand_in: str | None = None  # the older release whose snapshot stands in for this version
    requirements: tuple[str, ...] = ()  # the release's own version pins (empty: not known)
    pins_source: str = ""  # where those pins were read
    weight_sync: Mapping | None = None  # the HCCL communicator the weight-sync engine uses (None: not recorded)

    def describe(self) -> str:
        return f"{self.package} {self.version} ({self.origin}; names from {self.source})"

    def unknown(self, name: str) -> str:
        """Why ``name`` is not judged: the stand-in lacks it, the version itself was never read."""
        return (
            f"{name} is unknown to the stand-in snapshot of {self.package} {self.stand_in} ({self.source}); "
            f"whether {self.version} reads it was not checked: read its source, or add its snapshot "
            "(scripts/ascend_stack_snapshot.py)"
        )


def snapshots(package: str, suffix: str = ".yaml") -> dict[str, Path]:
    """version -> snapshot file, for the committed snapshots of ``package`` (``.pins.yaml``: pins only)."""
    prefix = f"{package}-"
    found = {}
    for path in SNAPSHOT_DIR.glob(f"{prefix}*{suffix}"):
        try:  # vllm-*.yaml also matches vllm-ascend-*.yaml and *.pins.yaml: keep names that end in a version
            found[str(Version(path.name[len(prefix) : -len(suffix)]))] = path
        except InvalidVersion:
            continue
    return found


def release_pins(package: str, version: str) -> tuple[list[str], str] | None:
    """(version pins, where they were read) of one release, from its own snapshot or pins file."""
    for suffix in (".yaml", ".pins.yaml"):
        path = snapshots(package, suffix).get(str(Version(version)))
        if path is not None and "requirements" in read_snapshot(path):
            return list(read_snapshot(path)["requirements"]), f"snapshot {path.name}"
    return None


def requirements_of(distribution: str, path: list[str] | None = None) -> list[Requirement] | None:
    """The installed ``distribution``'s unconditional ``Requires-Dist`` (extras left out); None if absent."""
    dist = installed_distribution(distribution, path)
    if dist is None:
        return None
    found = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            found.append(req)
    return found


def pin_conflicts(pins: list[str], against: list[Requirement]) -> list[tuple[Requirement, Requirement]]:
    """(pin, requirement) pairs where an exact ``==`` pin on one side falls outside the other's range.

    Only exact pins are decided (what vllm-ascend pins: ``transformers==5.14.1``); two open ranges are
    not compared.
    """
    mine = {canonicalize_name(r.name): r for r in against}
    found = []
    for line in pins:
        pin = Requirement(line)
        other = mine.get(canonicalize_name(pin.name))
        if other is None:
            continue
        for exact, ranged in ((pin, other), (other, pin)):
            spec = next((s for s in exact.specifier if s.operator in ("==", "===")), None)
            if spec is not None and "*" not in spec.version and not ranged.specifier.contains(spec.version, prereleases=True):
                found.append((pin, other))
                break
    return found


def supported_versions(package: str) -> list[str]:
    return sorted(snapshots(package), key=Version)


def installed_distribution(distribution: str, path: list[str] | None = None):
    """The first installed metadata of ``distribution`` on ``path`` (default sys.path), or None."""
    found = importlib.metadata.distributions(name=distribution, **({} if path is None else {"path": path}))
    return next(iter(found), None)


def installed_version(distribution: str, path: list[str] | None = None) -> str | None:
    dist = installed_distribution(distribution, path)
    return dist.version if dist is not None else None


def target_version(
    package: str, config=None, environ: Mapping[str, str] | None = None, path: list[str] | None = None
) -> tuple[str, str]:
    """(version, origin) of the release this job targets; raises ValueError for a malformed declaration."""
    environ = os.environ if environ is None else environ
    key = CONFIG_KEY.format(PACKAGES[package])
    declared = select(config, key) if config is not None else None
    candidates = [(declared, f"declared by {key}"), (environ.get(ENV_KEY[package]), f"declared by {ENV_KEY[package]}")]
    for value, origin in candidates:
        if value is not None and str(value).strip() not in ("", "auto"):
            try:
                Version(str(value))
            except InvalidVersion:
                raise ValueError(f"{origin}: {value!r} is not a version; accepted: auto or a version like 0.25.1rc1")
            return str(value).strip(), origin
    installed = installed_version(package, path)
    if installed is not None:
        return installed, "installed"
    return PINNED[package], "pinned by requirements/npu.txt (not installed here)"


@functools.cache
def read_snapshot(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _installed_surface(package: str, path: list[str] | None = None) -> dict | None:
    """The surface read from the installed package's own source files (no import of the package)."""
    # No path: the interpreter's own finders, so an editable install (a meta-path hook) is found too.
    name = PACKAGES[package]
    spec = importlib.util.find_spec(name) if path is None else importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).parent
    return read_surface(package, root)


def surface(
    package: str, config=None, environ: Mapping[str, str] | None = None, path: list[str] | None = None
) -> Surface:
    """The surface of the target release of ``package`` (see the module docstring for the order)."""
    version, origin = target_version(package, config, environ, path)
    data, source, stand_in = None, None, None
    if origin == "installed":
        data, source = _installed_surface(package, path), "the installed source"
    if data is None:
        known = snapshots(package)
        older = [v for v in known if Version(v) <= Version(version)]
        if not older:
            raise ValueError(
                f"{package} {version} ({origin}) is older than every supported release "
                f"({', '.join(supported_versions(package))}); see docs/ascend_tutorial/npu_backend.md"
            )
        best = max(older, key=Version)
        data = read_snapshot(known[best])
        stand_in = None if Version(best) == Version(version) else best
        source = f"snapshot {known[best].name}" + (f" (nearest release <= {version})" if stand_in else "")
    own_pins, pins_source = (data.get("requirements"), source) if stand_in is None else (None, "")
    pinned = release_pins(package, version) if stand_in is not None else None
    if pinned:
        own_pins, pins_source = pinned
    return Surface(
        package,
        version,
        origin,
        source,
        frozenset(data.get("env_vars", [])),
        frozenset(data.get("additional_config_keys", [])),
        dict(data.get("env_fallbacks", {})),
        stand_in,
        tuple(own_pins or ()),
        pins_source,
        data.get("weight_sync"),
    )


def _rollout_vllm_variables(table: Mapping) -> list[dict]:
    return [
        v for v in table.get("variables", []) if "rollout" in v.get("roles", []) and v["name"].startswith("VLLM_")
    ]


def emitted_names(table: Mapping) -> dict[str, set[str]]:
    """package -> the names the table can hand it: rollout ``VLLM_*`` variables and ``additional_config`` keys.

    A variable belongs to the package its prefix names (``VLLM_ASCEND_*``: vllm-ascend, other
    ``VLLM_*``: vLLM), unless the table says verl reads it (:func:`verl_read_names`).
    """
    names: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for var in _rollout_vllm_variables(table):
        if var.get("consumer") != "verl":
            names["vllm-ascend" if var["name"].startswith("VLLM_ASCEND_") else "vllm"].add(var["name"])
    for entry in table.get("additional_config", []):
        names[entry.get("consumer", "vllm-ascend")].add(f"additional_config.{entry['key']}")
    return names


def verl_read_names(table: Mapping) -> list[str]:
    """Rollout ``VLLM_*`` variables the table says verl itself reads (``VLLM_ASCEND_TASK_QUEUE_ENABLE``)."""
    return sorted(v["name"] for v in _rollout_vllm_variables(table) if v.get("consumer") == "verl")


def missing_names(table: Mapping, package: str, surface: Surface, gated: bool = True) -> list[str]:
    """Names the table can emit for ``package`` that ``surface`` does not define.

    With ``gated`` (the default), ``additional_config`` entries are exempt where the release lacks
    them: the profile does not emit those there (it reports the switch unavailable instead). The
    install gate tests ungated: the installed release must read every key the route can emit.
    """
    missing = []
    for name in sorted(emitted_names(table)[package]):
        if name.startswith("additional_config."):
            if not gated and name.split(".", 1)[1] not in surface.additional_config_keys:
                missing.append(name)
        elif name not in surface.env_vars:
            missing.append(name)
    return missing

