#!/usr/bin/env python3
"""Write the switch surface of one vLLM / vllm-ascend release as a committed YAML snapshot.

Why: CPU machines and CI cannot import vLLM-on-NPU or vllm-ascend, yet the env profile must
only emit names that the target release defines. This script reads a *released source archive*
(never installs it) and records, by static reading of the source:

- ``env_vars``: the keys of vLLM's ``environment_variables`` / vllm-ascend's ``env_variables``
  table (``vllm/envs.py``, ``vllm_ascend/envs.py``), i.e. every variable the release reads
  through its env module;
- ``additional_config_keys`` (vllm-ascend): every top-level key read from
  ``additional_config`` (``additional_config.get("k")``, ``"k" in additional_config``,
  ``additional_config["k"]`` and ``_get_config_value(..., additional_config, "k", ...)``);
- ``env_fallbacks`` (vllm-ascend): deprecated variable -> the ``additional_config`` key that
  wins over it (the ``_get_config_value`` calls, arguments bound by the helper's parameter names);
- ``requirements`` / ``cann`` (vllm-ascend): the release's version pins (``requirements.txt``, or
  a wheel's METADATA) and the CANN version of the image its Dockerfile builds on.

``--pins-only`` writes ``<package>-<version>.pins.yaml`` with the pins alone: for a release whose
pins the install check needs but whose switch surface is not a supported target (0.26.0rc1: a
registry wheel, no tag in vllm-ascend's repository); a declared version without its own surface
snapshot still borrows the newest older one (verl/ascend/env/stack.py).

Sources, in order of preference::

    pip download --no-deps --no-binary :all: vllm==0.23.0 -d /tmp/src         # then --archive
    git -C <vllm-ascend clone> archive --format=tar.gz -o va.tgz v0.23.0       # when no sdist builds

    python scripts/ascend_stack_snapshot.py --package vllm --version 0.23.0 --archive /tmp/src/vllm-0.23.0.tar.gz
    python scripts/ascend_stack_snapshot.py --package vllm-ascend --version 0.25.1rc1 --git <clone> --tag v0.25.1rc1
    pip download --no-deps --only-binary :all: --platform manylinux_2_34_aarch64 --python-version 3.11 \
        vllm-ascend==0.26.0rc1 -d /tmp/whl
    python scripts/ascend_stack_snapshot.py --package vllm-ascend --version 0.26.0rc1 --pins-only \
        --archive /tmp/whl/vllm_ascend-0.26.0rc1-cp311-cp311-manylinux_2_34_aarch64.whl

Output: ``verl/ascend/env/snapshots/<package>-<version>.yaml`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import yaml

from verl.ascend.env.stack_source import ENV_MODULES, RELEASE_FILES, release_facts, snapshot

OUT_DIR = Path(__file__).resolve().parents[1] / "verl" / "ascend" / "env" / "snapshots"


def _wanted(name: str) -> bool:
    """``.py`` sources, the top-level pins and Dockerfile, a wheel's METADATA."""
    return name.endswith(".py") or name in RELEASE_FILES or name.endswith(".dist-info/METADATA")


def read_archive(path: Path) -> dict[str, str]:
    """``relative path -> text`` of the files a snapshot reads, from an sdist (.tar.gz / .zip, top
    folder stripped) or a wheel (.whl, no top folder)."""
    files: dict[str, str] = {}
    if path.suffix in (".zip", ".whl"):
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                rel = name if path.suffix == ".whl" else name.split("/", 1)[-1]
                if _wanted(rel):
                    files[rel] = zf.read(name).decode("utf-8", "replace")
        return files
    with tarfile.open(path) as tf:
        for member in tf.getmembers():
            rel = member.name.split("/", 1)[-1]
            if member.isfile() and _wanted(rel):
                files[rel] = tf.extractfile(member).read().decode("utf-8", "replace")
    return files


def read_git_tag(repo: Path, tag: str) -> tuple[dict[str, str], str]:
    """Same as :func:`read_archive` for ``git archive <tag>`` of a local clone; also the tag's commit."""
    commit = subprocess.run(["git", "-C", str(repo), "rev-list", "-n1", tag], check=True, capture_output=True, text=True)
    blob = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", tag], check=True, capture_output=True)
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(blob.stdout)) as tf:
        for member in tf.getmembers():
            if member.isfile() and _wanted(member.name):
                files[member.name] = tf.extractfile(member).read().decode("utf-8", "replace")
    return files, commit.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, choices=sorted(ENV_MODULES))
    parser.add_argument("--version", required=True)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--archive", type=Path, help="released sdist (.tar.gz/.zip) or wheel (.whl) from the registry")
    src.add_argument("--git", type=Path, help="local clone of the project's repository (with --tag)")
    parser.add_argument("--tag", help="release tag for --git, e.g. v0.23.0")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument(
        "--pins-only",
        action="store_true",
        help="record only the release's requirement pins (<package>-<version>.pins.yaml), not its switch surface",
    )
    args = parser.parse_args(argv)
    if args.archive:
        files = read_archive(args.archive)
        digest = hashlib.sha256(args.archive.read_bytes()).hexdigest()
        kind = "wheel" if args.archive.suffix == ".whl" else "sdist"
        provenance = f"{kind} {args.archive.name} sha256:{digest}"
    else:
        if not args.tag:
            parser.error("--git needs --tag")
        files, commit = read_git_tag(args.git, args.tag)
        provenance = f"git tag {args.tag} (commit {commit})"
    args.out.mkdir(parents=True, exist_ok=True)
    if args.pins_only:
        facts = release_facts(files)
        if "requirements" not in facts:
            parser.error(f"{args.archive or args.git}: no requirements.txt or wheel METADATA to read pins from")
        data = {"package": args.package, "version": args.version, "source": provenance}
        data = {**data, "generated_by": "scripts/ascend_stack_snapshot.py", **facts}
        path = args.out / f"{args.package}-{args.version}.pins.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        print(f"{path}: {len(data['requirements'])} pins")
        return 0
    data = snapshot(args.package, args.version, files, provenance)
    path = args.out / f"{args.package}-{args.version}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    print(f"{path}: {len(data['env_vars'])} env vars, {len(data.get('additional_config_keys', []))} config keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
