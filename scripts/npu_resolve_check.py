#!/usr/bin/env python3
"""Ask pip's resolver, without installing anything, whether the NPU set installs on each supported platform.

Why: the NPU set (``requirements/npu.txt`` + ``requirements/base.txt``, which pins verl==0.9.1)
is only ever installed on Ascend hosts, so CI never proves that it resolves. This script asks
pip (``pip install --dry-run --only-binary :all: --platform ... --report``) for aarch64 and
x86_64, Python 3.11, and writes down per platform: resolved or not, each culprit package and
pip's reason.

- vLLM is left out of the set: it is built from its v0.23.0 tag with ``VLLM_TARGET_DEVICE=empty``
  (no wheel to resolve). ``--registry-vllm`` adds the registry's ``vllm==0.23.0`` as a second set
  per platform, to show why it cannot stand in.
- Platforms are given as every ``manylinux_2_N`` tag from 2_34 down (pip does not widen a
  ``--platform`` tag itself): vllm-ascend 0.23.0 ships only ``manylinux_2_34`` wheels, so an
  Ascend host needs glibc >= 2.34 anyway.
- Indexes: the registry, plus Ascend's index (triton-ascend) and, on x86_64, PyTorch's CPU
  index, as the quick start installs them. Each extra index is probed first; one that cannot
  be reached is left out and named in the result.
- A pinned requirement without a wheel on the queried indexes is a culprit. To find the next
  culprit too, the script then stands in for it with an empty local wheel of that name and
  version and asks again (at most ``--rounds`` times); a result that needed stand-ins is
  "resolved: no", and its stand-ins' own dependencies were not checked.

Usage (writes the committed result)::

    python scripts/npu_resolve_check.py --out docs/ascend_tutorial/npu_resolve_result.json
    python scripts/npu_resolve_check.py --capture DIR ...   # also keep pip's raw answers
    python scripts/npu_resolve_check.py --replay DIR        # evaluate kept answers, no network

Exit codes: 0 every set resolves; 1 at least one does not; 2 undecided (an index or pip
failed, bad input).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
REQUIREMENT_FILES = ("requirements/npu.txt", "requirements/base.txt")
ARCHES = ("aarch64", "x86_64")
GLIBC_MAX, GLIBC_MIN = 34, 17
ASCEND_INDEXES = ("https://mirrors.huaweicloud.com/ascend/repos/pypi",)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REGISTRY_VLLM = "vllm==0.23.0"
LEFT_OUT = {
    "vllm": (
        "built from its v0.23.0 tag with VLLM_TARGET_DEVICE=empty (no device code, no torch pin), as "
        "vllm-ascend's Dockerfile does; not a registry artifact, so not resolved here"
    )
}
NETWORK_ERRORS = re.compile(
    r"NewConnectionError|NameResolutionError|Max retries exceeded|Failed to establish a new connection|ProxyError|"
    r"connection broken by|Could not fetch URL|Temporary failure in name resolution|Read timed out|ConnectTimeout"
)
NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (?P<req>\S+)(?P<rest>.*)$")
FROM_VERSIONS = re.compile(r"\(from versions: (?P<versions>[^)]*)\)\s*$")
CONFLICT = re.compile(r"^ERROR: Cannot install (?P<what>.+) because these package versions have conflicting")
PROGRESS = ("Collecting ", "  Downloading ", "Downloading ", "  Using cached ", "Using cached ", "Processing ",
            "Looking in ")
# Where a package the registry lacks comes from in the documented install (quick_start.md, step 3-4).
SOURCES = {
    "triton-ascend": "Ascend's index https://mirrors.huaweicloud.com/ascend/repos/pypi (vllm-ascend v0.23.0 "
    "docs/source/installation.md, Dockerfile)",
    "torch": "on x86_64, torch 2.10.0+cpu from PyTorch's CPU index https://download.pytorch.org/whl/cpu "
    "(torch-npu 2.10.0.post4's x86_64 wheel requires torch==2.10.0+cpu)",
    "arctic-inference": "Ascend's index, as vllm-ascend's Dockerfile installs vllm-ascend with "
    "PIP_EXTRA_INDEX_URL=https://mirrors.huaweicloud.com/ascend/repos/pypi (not verified from here), or built from "
    "the registry's sdist",
}
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")


class InputError(ValueError):
    """Bad input (a missing file, an unreadable capture): exit 2, naming the culprit."""


# --------------------------------------------------------------------------------------------
# What is asked


def requirement_set(repo: Path = REPO) -> list[str]:
    """The NPU set: every requirement line of npu.txt and base.txt (comments dropped), in order."""
    lines: list[str] = []
    for rel in REQUIREMENT_FILES:
        path = repo / rel
        if not path.is_file():
            raise InputError(f"{path}: requirements file not found")
        for raw in path.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line and line not in lines:
                lines.append(line)
    return lines


def platform_tags(arch: str) -> list[str]:
    """``manylinux_2_34_<arch>`` down to ``manylinux_2_17_<arch>`` plus ``manylinux2014_<arch>``."""
    tags = [f"manylinux_2_{n}_{arch}" for n in range(GLIBC_MAX, GLIBC_MIN - 1, -1)]
    return [*tags, f"manylinux2014_{arch}"]


def probe_index(url: str, timeout: float = 10.0) -> tuple[bool, str]:
    """Whether ``url`` answers at all (any HTTP status counts as reachable)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/", timeout=timeout) as answer:
            return True, f"HTTP {answer.status}"
    except urllib.error.HTTPError as e:
        return True, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return False, f"unreachable from this machine ({getattr(e, 'reason', e)})"


def stand_in_wheel(folder: Path, name: str, version: str) -> Path:
    """An empty, dependency-free wheel ``name==version`` (lets the resolver go past a known culprit)."""
    dist = re.sub(r"[-_.]+", "_", name)
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: npu_resolve_check\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)
        whl.writestr(f"{info}/RECORD", "".join(f"{m},,\n" for m in [*files, f"{info}/RECORD"]))
    return path


# --------------------------------------------------------------------------------------------
# pip's answer


@dataclass
class PipAnswer:
    rc: int
    stderr: str
    report: dict | None


def parse_report(report: dict) -> dict[str, dict]:
    """name -> {version, file, requested} of every package pip would install."""
    out = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        url = (item.get("download_info") or {}).get("url", "")
        out[re.sub(r"[-_.]+", "-", meta["name"]).lower()] = {
            "version": meta["version"],
            "file": urllib.parse.unquote(url.rsplit("/", 1)[-1]),
            "requested": bool(item.get("requested")),
        }
    return dict(sorted(out.items()))


def _conflict_lines(lines: list[str], start: int) -> list[str]:
    """The indented lines under "The conflict is caused by:"."""
    out = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        out.append(line.strip())
    return out


def _conflict(lines: list[str], i: int) -> dict:
    """ResolutionImpossible: one culprit per contested package, with who asks for which version.

    ``wanted`` maps each package named in "The conflict is caused by" to its requirements there;
    ``unavailable`` lists the packages pip says no distribution here meets all of.
    """
    caused = next((j for j in range(i, len(lines)) if lines[j].startswith("The conflict is caused by")), None)
    causes = _conflict_lines(lines, caused) if caused is not None else []
    extra = next((j for j in range(i, len(lines)) if lines[j].startswith("Additionally, some packages")), None)
    unavailable = [u.lower() for u in _conflict_lines(lines, extra)] if extra is not None else []
    wanted: dict[str, list[tuple[str, str]]] = {}  # package -> [(specifier, who asks)]
    for cause in causes:
        who = re.match(r"(?:The user requested (?P<req>\S+)|(?P<pkg>\S+) (?P<ver>\S+) depends on (?P<dep>\S+))", cause)
        if who is None:
            continue
        req, asker = (who["req"], "the requirement set") if who["req"] else (who["dep"], f"{who['pkg']} {who['ver']}")
        name = re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower()
        wanted.setdefault(name, []).append((req[len(name):], asker))
    contested = [n for n in wanted if n in unavailable] or [n for n, w in wanted.items() if len({s for s, _ in w}) > 1]
    culprits = [
        {
            "package": name,
            "requirement": f"{name} ({' vs '.join(dict.fromkeys(spec for spec, _ in wanted[name]))})",
            "required_by": "; ".join(f"{asker}: {name}{spec}" for spec, asker in wanted[name]),
            "reason": f"no {name} distribution on the queried indexes meets every requirement on it",
        }
        for name in contested
    ]
    reason = "; ".join(causes) or lines[i].removeprefix("ERROR: ")
    return {"kind": "conflict", "culprits": culprits, "wanted": wanted, "unavailable": unavailable, "reason": reason}


def parse_failure(stderr: str) -> dict:
    """pip's refusal as {kind, culprits: [{package, requirement, required_by, reason}], reason}.

    kind: ``no_wheel`` (no distribution of a requirement for this platform), ``conflict``
    (ResolutionImpossible), ``network`` (an index could not be read: undecided), ``error``.
    """
    lines = stderr.splitlines()
    if NETWORK_ERRORS.search(stderr):  # an index failed: "no version found" may only mean "not read"
        detail = next((ln for ln in lines if NETWORK_ERRORS.search(ln)), "")
        return {"kind": "network", "culprits": [], "reason": detail.strip()[:300]}
    for i, line in enumerate(lines):
        match = NOT_FOUND.search(line)
        if match:
            req, rest = match["req"], match["rest"]
            versions = FROM_VERSIONS.search(rest)
            parent = re.search(r"\(from (?!versions:)(?P<parent>[^()]*(?:\([^()]*\))?[^()]*)\)", rest)
            available = versions["versions"] if versions else "?"
            culprit = {
                "package": re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower(),
                "requirement": req,
                "required_by": parent["parent"] if parent else None,
                "reason": f"no wheel of {req} for this platform; versions with a wheel here: {available}",
            }
            return {"kind": "no_wheel", "culprits": [culprit], "reason": line.removeprefix("ERROR: ")}
    for i, line in enumerate(lines):
        if CONFLICT.search(line):
            return _conflict(lines, i)
    errors = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR:")]
    reason = (errors[-1] if errors else stderr.strip()[-300:]) or "pip failed"
    return {"kind": "error", "culprits": [], "reason": reason}


# --------------------------------------------------------------------------------------------
# Asking pip: live (optionally keeping its answers) or replayed from kept answers


class LivePip:
    """Runs pip; with ``capture`` keeps each answer as <label>.log (stdout + stderr) / .rc / .report.json."""

    def __init__(self, capture: Path | None = None, timeout: int = 900):
        self.capture, self.timeout, self.pip_version = capture, timeout, _installed_pip()
        if capture:
            capture.mkdir(parents=True, exist_ok=True)

    def ask(self, label: str, args: list[str]) -> PipAnswer:
        with tempfile.TemporaryDirectory(prefix="npu-resolve-") as tmp:
            report_path = Path(tmp) / "report.json"
            cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--progress-bar", "off",
                   "--report", str(report_path), "--target", str(Path(tmp) / "target"), *args]
            env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
            env["PIP_CONFIG_FILE"] = os.devnull  # the registry as a user's pip sees it: no local config
            try:
                done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      timeout=self.timeout, env=env)
                rc, stderr = done.returncode, done.stdout  # the conflict details are on stdout
            except subprocess.TimeoutExpired:
                rc, stderr = 124, f"ERROR: pip did not answer within {self.timeout} s"
            report = json.loads(report_path.read_text()) if rc == 0 and report_path.is_file() else None
        answer = PipAnswer(rc, stderr, _reduced(report))
        if self.capture:
            (self.capture / f"{label}.log").write_text(answer_lines(stderr))
            (self.capture / f"{label}.rc").write_text(f"{rc}\n")
            if answer.report is not None:
                (self.capture / f"{label}.report.json").write_text(json.dumps(answer.report) + "\n")
        return answer


def answer_lines(log: str) -> str:
    """pip's output without its per-package progress lines (what ``--capture`` keeps)."""
    return "".join(line for line in log.splitlines(keepends=True) if not line.startswith(PROGRESS))


def _reduced(report: dict | None) -> dict | None:
    """The report with only the fields this script reads (a full one holds every package's metadata)."""
    if report is None:
        return None
    keep = []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        keep.append({
            "download_info": {"url": (item.get("download_info") or {}).get("url", "")},
            "metadata": {"name": meta.get("name"), "version": meta.get("version")},
            "requested": item.get("requested", False),
        })
    return {"version": report.get("version"), "pip_version": report.get("pip_version"), "install": keep}


class ReplayPip:
    """Answers from a folder written by ``--capture`` (no network)."""

    def __init__(self, folder: Path):
        if not folder.is_dir():
            raise InputError(f"{folder}: capture folder not found (written by --capture)")
        self.folder = folder
        path = folder / "capture.json"
        try:
            self.capture = json.loads(path.read_text()) if path.is_file() else {}
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON ({e})") from None
        self.pip_version = self.capture.get("pip_version")

    def ask(self, label: str, args: list[str]) -> PipAnswer:
        rc_file = self.folder / f"{label}.rc"
        if not rc_file.is_file():
            raise InputError(f"{rc_file}: no captured answer for {label!r} (capture it again with --capture)")
        try:
            rc = int(rc_file.read_text().strip())
        except ValueError:
            raise InputError(f"{rc_file}: not an exit status: {rc_file.read_text()[:40]!r}") from None
        stderr_file, report_file = self.folder / f"{label}.log", self.folder / f"{label}.report.json"
        stderr = stderr_file.read_text() if stderr_file.is_file() else ""
        try:
            report = json.loads(report_file.read_text()) if report_file.is_file() else None
        except json.JSONDecodeError as e:
            raise InputError(f"{report_file}: not a pip report ({e})") from None
        if rc == 0 and report is None:
            raise InputError(f"{report_file}: missing, but {rc_file} says pip succeeded")
        return PipAnswer(rc, stderr, report)


# --------------------------------------------------------------------------------------------
# One set on one platform


def check(pip, arch: str, python: str, requirements: list[str], indexes: list[str], label: str,
          rounds: int = 6) -> dict:
    """Resolve ``requirements`` for ``arch``; stand in for pinned culprits without a wheel, up to ``rounds``."""
    culprits: list[dict] = []
    stood_in: set[tuple[str, str]] = set()
    with tempfile.TemporaryDirectory(prefix="npu-stand-ins-") as tmp:
        stand_ins = Path(tmp)
        for n in range(1, rounds + 1):
            args = ["--only-binary", ":all:", "--python-version", python, "--implementation", "cp",
                    "--retries", "1", "--timeout", "30", "--find-links", str(stand_ins)]
            for tag in platform_tags(arch):
                args += ["--platform", tag]
            for url in indexes:
                args += ["--extra-index-url", url]
            answer = pip.ask(f"{label}.round{n}", [*args, *requirements])
            if answer.rc == 0:
                return {"resolved": not culprits, "rounds": n, "culprits": culprits,
                        "stood_in_for": [f"{name}=={version}" for name, version in sorted(stood_in)],
                        "packages": parse_report(answer.report or {})}
            failure = parse_failure(answer.stderr)
            culprits += [_with_source(c) for c in failure["culprits"] if _with_source(c) not in culprits]
            pin = _stand_in_pin(failure, stood_in)
            if pin is None:  # a real conflict, a range without any wheel, or pip could not tell
                return {"resolved": False, "undecided": failure["kind"] in ("network", "error"),
                        "rounds": n, "culprits": culprits, "failure": failure}
            stand_in_wheel(stand_ins, *pin)
            stood_in.add(pin)
    return {"resolved": False, "rounds": rounds, "culprits": culprits,
            "failure": {"kind": "rounds", "reason": f"still failing after {rounds} rounds"}}


def _with_source(culprit: dict) -> dict:
    """The culprit plus where the documented install gets it (torch: only the x86 ``+cpu`` build)."""
    source = SOURCES.get(culprit["package"])
    if culprit["package"] == "torch" and "+cpu" not in culprit["requirement"]:
        source = None
    return {**culprit, "comes_from": source} if source else culprit


def _stand_in_pin(failure: dict, stood_in: set[tuple[str, str]]) -> tuple[str, str] | None:
    """(name, version) to stand in for next, else None (a real conflict, or nothing pinned).

    A ``no_wheel`` culprit's pin; or, in a conflict over a package pip found no distribution of
    at all, the pin that every requirement on it in the conflict accepts (torch-npu's
    ``torch==2.10.0+cpu`` against ``torch==2.10.0`` on x86 without PyTorch's CPU index). Two
    pins no single version meets (vllm's torch 2.11.0 against 2.10.0) are a real conflict.
    """
    if failure["kind"] == "no_wheel":
        pin = PIN.match(failure["culprits"][0]["requirement"])
        found = (pin["name"].lower(), pin["version"]) if pin else None
        return found if found and found not in stood_in else None
    if failure["kind"] != "conflict":
        return None
    for name in failure["unavailable"]:
        specs = [spec for spec, _ in failure["wanted"].get(name, [])]
        for spec in specs:
            version = spec[2:] if spec.startswith("==") else None
            if version and (name, version) not in stood_in and all(Version(version) in SpecifierSet(s) for s in specs):
                return name, version
    return None


def extra_indexes(arch: str, probe, use: bool) -> tuple[list[str], list[dict]]:
    """The extra indexes for ``arch`` that answer, and what was found about each one tried."""
    if not use:
        return [], []
    wanted = [*ASCEND_INDEXES, *([TORCH_CPU_INDEX] if arch == "x86_64" else [])]
    found, usable = [], []
    for url in wanted:
        ok, detail = probe(url)
        found.append({"url": url, "reachable": ok, "detail": detail})
        if ok:
            usable.append(url)
    return usable, found


def run(pip, python: str, arches: list[str], registry_vllm: bool, use_extra: bool, probe, rounds: int) -> dict:
    requirements = requirement_set()
    results = []
    for arch in arches:
        indexes, tried = extra_indexes(arch, probe, use_extra)
        sets = [("npu", requirements)]
        if registry_vllm:
            sets.append(("npu+registry-vllm", [*requirements, REGISTRY_VLLM]))
        for name, reqs in sets:
            result = check(pip, arch, python, reqs, indexes, f"{arch}.{name}", rounds)
            results.append({"platform": arch, "python": python, "set": name, "platform_tags": platform_tags(arch),
                            "extra_indexes": tried, **result})
    return {"requirements": requirements, "left_out": LEFT_OUT, "results": results}


# --------------------------------------------------------------------------------------------
# CLI


def summary_lines(data: dict) -> list[str]:
    out = []
    for r in data["results"]:
        state = "undecided" if r.get("undecided") else ("yes" if r["resolved"] else "no")
        out.append(f"{r['platform']} py{r['python']} [{r['set']}]: resolved {state}")
        for c in r["culprits"]:
            by = f" (required by {c['required_by']})" if c.get("required_by") else ""
            out.append(f"  culprit {c['requirement']}{by}: {c['reason']}")
            if c.get("comes_from"):
                out.append(f"    comes from: {c['comes_from']}")
        if r.get("failure"):
            out.append(f"  stops at: {r['failure']['reason']}")
        if r.get("stood_in_for"):
            stand_ins = ", ".join(r["stood_in_for"])
            out.append(f"  resolves otherwise, with stand-ins (their dependencies unchecked) for: {stand_ins}")
        for idx in r["extra_indexes"]:
            if not idx["reachable"]:
                out.append(f"  extra index {idx['url']}: {idx['detail']} (left out)")
    return out


def exit_code(data: dict) -> int:
    if any(r.get("undecided") for r in data["results"]):
        return 2
    return 0 if all(r["resolved"] for r in data["results"]) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--python", default="3.11", help="target Python version (default 3.11)")
    parser.add_argument("--platform", action="append", choices=ARCHES, help="repeatable; default: both")
    parser.add_argument("--registry-vllm", action="store_true", help=f"also resolve the set plus {REGISTRY_VLLM}")
    parser.add_argument("--no-extra-index", action="store_true", help="the registry only (no Ascend/PyTorch index)")
    parser.add_argument("--rounds", type=int, default=6, help="stand-in rounds per set (default 6)")
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--capture", type=Path, help="keep pip's answers in this folder")
    mode.add_argument("--replay", type=Path, help="evaluate answers kept by --capture (no network)")
    args = parser.parse_args(argv)
    arches = args.platform or list(ARCHES)
    try:
        if args.replay:
            pip = ReplayPip(args.replay)
            probe = _replayed_probe(pip)
        else:
            pip, probe = LivePip(args.capture), probe_index
        data = run(pip, args.python, arches, args.registry_vllm, not args.no_extra_index, probe, args.rounds)
    except InputError as e:
        print(f"npu_resolve_check: {e}", file=sys.stderr)
        return 2
    command = "python scripts/npu_resolve_check.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    asked = {"command": command.strip(), "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "pip_version": pip.pip_version}
    if args.capture:
        capture = {**asked, "probes": _probes(data)}
        (args.capture / "capture.json").write_text(json.dumps(capture, indent=1) + "\n")
    if args.replay:  # pip was asked when the answers were captured
        asked = {**asked, "replayed_from": str(args.replay),
                 "asked": {k: pip.capture.get(k) for k in ("command", "date", "pip_version")}}
    data = {"generated_by": "scripts/npu_resolve_check.py", **asked, **data}
    for line in summary_lines(data):
        print(line)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    return exit_code(data)


def _probes(data: dict) -> dict:
    return {i["url"]: [i["reachable"], i["detail"]] for r in data["results"] for i in r["extra_indexes"]}


def _replayed_probe(pip: ReplayPip):
    path, known = pip.folder / "capture.json", pip.capture.get("probes", {})

    def probe(url: str) -> tuple[bool, str]:
        if url not in known:
            raise InputError(f"{path}: no captured probe of {url}")
        ok, detail = known[url]
        return bool(ok), str(detail)

    return probe


def _installed_pip() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pip")
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
