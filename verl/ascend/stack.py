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
``stack_snapshots/`` (``scripts/ascend_stack_snapshot.py`` generates them from released source
archives); for a version without its own snapshot, the newest snapshot not newer than it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

SNAPSHOT_DIR = Path(__file__).with_name("stack_snapshots")
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

    def describe(self) -> str:
        return f"{self.package} {self.version} ({self.origin}; names from {self.source})"


def snapshots(package: str) -> dict[str, Path]:
    """version -> snapshot file, for the committed snapshots of ``package``."""
    prefix = f"{package}-"
    found = {}
    for path in SNAPSHOT_DIR.glob(f"{prefix}*.yaml"):
        try:  # vllm-*.yaml also matches vllm-ascend-*.yaml: keep names that end in a version
            found[str(Version(path.stem[len(prefix) :]))] = path
        except InvalidVersion:
            continue
    return found


def supported_versions(package: str) -> list[str]:
    return sorted(snapshots(package), key=Version)


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def target_version(package: str, config=None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(version, origin) of the release this job targets; raises ValueError for a malformed declaration."""
    from verl.ascend.env_profile import _select

    environ = os.environ if environ is None else environ
    key = CONFIG_KEY.format(PACKAGES[package])
    declared = _select(config, key) if config is not None else None
    candidates = [(declared, f"declared by {key}"), (environ.get(ENV_KEY[package]), f"declared by {ENV_KEY[package]}")]
    for value, origin in candidates:
        if value is not None and str(value).strip() not in ("", "auto"):
            try:
                Version(str(value))
            except InvalidVersion:
                raise ValueError(f"{origin}: {value!r} is not a version; accepted: auto or a version like 0.25.1rc1")
            return str(value).strip(), origin
    installed = _installed(package)
    if installed is not None:
        return installed, "installed"
    return PINNED[package], "pinned by requirements/npu.txt (not installed here)"


@functools.cache
def _read_snapshot(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _installed_surface(package: str) -> dict | None:
    """The surface read from the installed package's own source files (no import of the package)."""
    from verl.ascend.stack_source import read_surface

    spec = importlib.util.find_spec(PACKAGES[package])
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).parent
    return read_surface(package, root)


def surface(package: str, config=None, environ: Mapping[str, str] | None = None) -> Surface:
    """The surface of the target release of ``package`` (see the module docstring for the order)."""
    version, origin = target_version(package, config, environ)
    data, source = None, None
    if origin == "installed":
        data, source = _installed_surface(package), "the installed source"
    if data is None:
        known = snapshots(package)
        older = [v for v in known if Version(v) <= Version(version)]
        if not older:
            raise ValueError(
                f"{package} {version} ({origin}) is older than every supported release "
                f"({', '.join(supported_versions(package))}); see docs/ascend_tutorial/npu_backend.md"
            )
        best = max(older, key=Version)
        data = _read_snapshot(known[best])
        source = f"snapshot {known[best].name}" + ("" if best == version else f" (nearest release <= {version})")
    return Surface(
        package,
        version,
        origin,
        source,
        frozenset(data.get("env_vars", [])),
        frozenset(data.get("additional_config_keys", [])),
        dict(data.get("env_fallbacks", {})),
    )


# The rest of the NPU set (requirements/npu.txt), for the install acceptance check.
EXPECTED = {
    "torch": "2.10.0",
    "torch-npu": "2.10.0.post4",
    "transformers": "5.5.4",
    "vllm": PINNED["vllm"],
    "vllm-ascend": PINNED["vllm-ascend"],
    "verl": "0.9.1",
}


def emitted_names(table: Mapping) -> dict[str, set[str]]:
    """package -> the env variables and ``additional_config`` keys the profile table can emit for it."""
    names: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for var in table.get("variables", []):
        if var.get("consumer") in names:
            names[var["consumer"]].add(var["name"])
    for entry in table.get("additional_config", []):
        names[entry.get("consumer", "vllm-ascend")].add(f"additional_config.{entry['key']}")
    return names


def missing_names(table: Mapping, package: str, surface: Surface, gated: bool = True) -> list[str]:
    """Names the table can emit for ``package`` that ``surface`` does not define.

    With ``gated`` (the default), ``additional_config`` entries are exempt where the release lacks
    them: the profile does not emit those there (it reports the switch unavailable instead).
    """
    missing = []
    for name in sorted(emitted_names(table)[package]):
        if name.startswith("additional_config."):
            if not gated and name.split(".", 1)[1] not in surface.additional_config_keys:
                missing.append(name)
        elif name not in surface.env_vars:
            missing.append(name)
    return missing


def main(environ: Mapping[str, str] | None = None) -> int:
    """``python -m verl.ascend.stack``: the install acceptance check of an Ascend host.

    Prints each package of the NPU set with its installed and expected version and, for vLLM and
    vllm-ascend, the profile's names missing from the installed release. Exit 1 on any mismatch.
    """
    from verl.ascend.env_profile import load_table

    ok = True
    for package, expected in EXPECTED.items():
        installed = _installed(package)
        good = installed == expected
        ok &= good
        print(f"{'ok' if good else 'MISMATCH':8} {package}: installed {installed or 'none'}, expected {expected}")
    for package in PACKAGES:
        if _installed(package) is None:
            continue
        found = surface(package, None, environ)
        missing = missing_names(load_table(), package, found)
        ok &= not missing
        print(f"{'ok' if not missing else 'MISMATCH':8} {found.describe()}: missing {', '.join(missing) or 'none'}")
    print("stack check: " + ("OK" if ok else "FAILED (see MISMATCH lines; requirements/npu.txt says how to install)"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
