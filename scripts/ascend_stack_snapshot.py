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
  wins over it (the ``_get_config_value(additional_config, key, ENV, ...)`` pairs).

Sources, in order of preference::

    pip download --no-deps --no-binary :all: vllm==0.23.0 -d /tmp/src         # then --archive
    git -C <vllm-ascend clone> archive --format=tar.gz -o va.tgz v0.23.0       # when no sdist builds

    python scripts/ascend_stack_snapshot.py --package vllm --version 0.23.0 --archive /tmp/src/vllm-0.23.0.tar.gz
    python scripts/ascend_stack_snapshot.py --package vllm-ascend --version 0.25.1rc1 --git <clone> --tag v0.25.1rc1

Output: ``verl/ascend/stack_snapshots/<package>-<version>.yaml`` (``--out`` to change).
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

from verl.ascend.stack_source import ENV_MODULES, snapshot

OUT_DIR = Path(__file__).resolve().parents[1] / "verl" / "ascend" / "stack_snapshots"


def read_archive(path: Path) -> dict[str, str]:
    """``relative path -> text`` of every ``.py`` file in an sdist (.tar.gz / .zip), top folder stripped."""
    files: dict[str, str] = {}
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.endswith(".py"):
                    files[name.split("/", 1)[-1]] = zf.read(name).decode("utf-8", "replace")
        return files
    with tarfile.open(path) as tf:
        for member in tf.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                data = tf.extractfile(member).read()
                files[member.name.split("/", 1)[-1]] = data.decode("utf-8", "replace")
    return files


def read_git_tag(repo: Path, tag: str) -> tuple[dict[str, str], str]:
    """Same as :func:`read_archive` for ``git archive <tag>`` of a local clone; also the tag's commit."""
    commit = subprocess.run(["git", "-C", str(repo), "rev-list", "-n1", tag], check=True, capture_output=True, text=True)
    blob = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", tag], check=True, capture_output=True)
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(blob.stdout)) as tf:
        for member in tf.getmembers():
            if member.isfile() and member.name.endswith(".py"):
                files[member.name] = tf.extractfile(member).read().decode("utf-8", "replace")
    return files, commit.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, choices=sorted(ENV_MODULES))
    parser.add_argument("--version", required=True)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--archive", type=Path, help="released sdist (.tar.gz or .zip) from the package registry")
    src.add_argument("--git", type=Path, help="local clone of the project's repository (with --tag)")
    parser.add_argument("--tag", help="release tag for --git, e.g. v0.23.0")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    if args.archive:
        files = read_archive(args.archive)
        digest = hashlib.sha256(args.archive.read_bytes()).hexdigest()
        provenance = f"sdist {args.archive.name} sha256:{digest}"
    else:
        if not args.tag:
            parser.error("--git needs --tag")
        files, commit = read_git_tag(args.git, args.tag)
        provenance = f"git tag {args.tag} (commit {commit})"
    data = snapshot(args.package, args.version, files, provenance)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.package}-{args.version}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    print(f"{path}: {len(data['env_vars'])} env vars, {len(data.get('additional_config_keys', []))} config keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
