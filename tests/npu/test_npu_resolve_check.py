"""scripts/npu_resolve_check.py on pip's real answers, replayed (no network).

``fixtures/npu_resolve/`` is the capture of the run that wrote
docs/ascend_tutorial/npu_resolve_result.json (``--registry-vllm --capture``): pip 26.3 asked about
the NPU set for aarch64 and x86_64, Python 3.11. ``fixtures/npu_resolve_network/`` holds pip's
real answer when the only index it may read cannot be reached.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "npu_resolve_check.py"
CAPTURE = Path(__file__).parent / "fixtures" / "npu_resolve"
NETWORK = Path(__file__).parent / "fixtures" / "npu_resolve_network"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("npu_resolve_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def log(name: str, folder: Path = CAPTURE) -> str:
    return (folder / f"{name}.log").read_text()


# --------------------------------------------------------------------------- parsing pip's answers


def test_a_pin_without_a_wheel_names_the_versions_that_have_one(check):
    failure = check.parse_failure(log("aarch64.npu.round1"))
    assert failure["kind"] == "no_wheel"
    (culprit,) = failure["culprits"]
    assert culprit["package"] == "triton-ascend" and culprit["requirement"] == "triton-ascend==3.2.2"
    assert culprit["required_by"] is None  # a top-level requirement of npu.txt
    assert "3.2.0rc2, 3.2.0rc3, 3.2.0rc4, 3.2.0" in culprit["reason"]
    assert check._stand_in_pin(failure, set()) == ("triton-ascend", "3.2.2")
    assert check._stand_in_pin(failure, {("triton-ascend", "3.2.2")}) is None  # never the same stand-in twice


def test_a_transitive_pin_names_the_package_that_requires_it(check):
    (culprit,) = check.parse_failure(log("aarch64.npu.round2"))["culprits"]
    assert culprit["requirement"] == "arctic-inference==0.1.1" and culprit["required_by"] == "vllm-ascend"
    assert culprit["reason"].endswith("0.0.1, 0.0.2, 0.0.3, 0.0.4")


def test_x86_torch_npu_needs_the_cpu_build_of_torch(check):
    failure = check.parse_failure(log("x86_64.npu.round2"))
    assert failure["kind"] == "conflict" and failure["unavailable"] == ["torch"]
    (culprit,) = failure["culprits"]
    assert culprit["requirement"] == "torch (==2.10.0 vs ==2.10.0+cpu)"
    assert "torch-npu 2.10.0.post4: torch==2.10.0+cpu" in culprit["required_by"]
    # 2.10.0+cpu meets ==2.10.0 too (PEP 440 local label): a stand-in can go on
    assert check._stand_in_pin(failure, {("triton-ascend", "3.2.2")}) == ("torch", "2.10.0+cpu")


def test_registry_vllm_is_a_real_conflict_over_torch(check):
    failure = check.parse_failure(log("aarch64.npu+registry-vllm.round3"))
    (culprit,) = failure["culprits"]
    assert culprit["requirement"] == "torch (==2.10.0 vs ==2.11.0)"
    assert "vllm 0.23.0: torch==2.11.0" in culprit["required_by"]
    assert check._stand_in_pin(failure, set()) is None  # no torch meets both pins


def test_an_unreachable_index_is_undecided_not_a_missing_wheel(check):
    failure = check.parse_failure(log("aarch64.npu.round1", NETWORK))
    assert failure["kind"] == "network" and failure["culprits"] == []
    assert "mirrors.huaweicloud.com" in failure["reason"]


def test_the_report_lists_what_would_be_installed_with_its_wheel(check):
    report = json.loads((CAPTURE / "aarch64.npu.round3.report.json").read_text())
    packages = check.parse_report(report)
    assert packages["vllm-ascend"]["version"] == "0.23.0"
    assert packages["vllm-ascend"]["file"] == "vllm_ascend-0.23.0-cp311-cp311-manylinux_2_34_aarch64.whl"
    assert packages["torch-npu"]["file"].endswith("manylinux_2_28_aarch64.whl")
    assert packages["verl"]["version"] == "0.9.1" and packages["transformers"]["version"] == "5.5.4"
    assert packages["triton-ascend"]["file"] == "triton_ascend-3.2.2-py3-none-any.whl"  # the stand-in
    assert "vllm" not in packages  # left out: source-built


def test_x86_report_names_the_torch_stand_in_unquoted(check):
    packages = check.parse_report(json.loads((CAPTURE / "x86_64.npu.round4.report.json").read_text()))
    assert packages["torch"] == {"version": "2.10.0+cpu", "file": "torch-2.10.0+cpu-py3-none-any.whl", "requested": True}
    assert packages["vllm-ascend"]["file"] == "vllm_ascend-0.23.0-cp311-cp311-manylinux_2_34_x86_64.whl"


def test_platform_tags_run_from_glibc_2_34_down(check):
    tags = check.platform_tags("aarch64")
    assert tags[0] == "manylinux_2_34_aarch64" and tags[-1] == "manylinux2014_aarch64"
    assert "manylinux_2_28_aarch64" in tags and "manylinux_2_35_aarch64" not in tags


def test_stand_in_wheel_is_installable_metadata(check, tmp_path):
    import zipfile

    path = check.stand_in_wheel(tmp_path, "torch", "2.10.0+cpu")
    assert path.name == "torch-2.10.0+cpu-py3-none-any.whl"
    with zipfile.ZipFile(path) as whl:
        assert "Version: 2.10.0+cpu" in whl.read("torch-2.10.0+cpu.dist-info/METADATA").decode()


# --------------------------------------------------------------------------- the CLI on the captured answers


def test_replay_of_the_committed_run(check, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert check.main(["--replay", str(CAPTURE), "--registry-vllm", "--out", str(out)]) == 1
    data = json.loads(out.read_text())
    by = {(r["platform"], r["set"]): r for r in data["results"]}
    assert set(by) == {(a, s) for a in ("aarch64", "x86_64") for s in ("npu", "npu+registry-vllm")}
    assert not any(r["resolved"] for r in by.values())
    assert by["aarch64", "npu"]["stood_in_for"] == ["arctic-inference==0.1.1", "triton-ascend==3.2.2"]
    assert by["x86_64", "npu"]["stood_in_for"] == ["arctic-inference==0.1.1", "torch==2.10.0+cpu", "triton-ascend==3.2.2"]
    assert by["aarch64", "npu+registry-vllm"]["failure"]["kind"] == "conflict"
    assert data["left_out"]["vllm"].startswith("built from its v0.23.0 tag")
    assert data["asked"]["pip_version"] == "26.3"
    printed = capsys.readouterr().out
    assert "aarch64 py3.11 [npu]: resolved no" in printed and "(left out)" in printed


def test_committed_result_is_what_the_capture_says(check, tmp_path):
    """docs/ascend_tutorial/npu_resolve_result.json was written by the run captured in the fixture."""
    out = tmp_path / "result.json"
    check.main(["--replay", str(CAPTURE), "--registry-vllm", "--out", str(out)])
    committed = json.loads((REPO / "docs" / "ascend_tutorial" / "npu_resolve_result.json").read_text())
    replayed = json.loads(out.read_text())
    assert committed["results"] == replayed["results"] and committed["requirements"] == replayed["requirements"]
    assert committed["asked"] == replayed["asked"]  # the live run: its command, date and pip
    assert committed["asked"]["command"].endswith("--registry-vllm --capture tests/npu/fixtures/npu_resolve "
                                                  "--out docs/ascend_tutorial/npu_resolve_result.json")


def copy_set(src_label: str, dst_label: str, folder: Path, src: Path = CAPTURE) -> None:
    for suffix in (".log", ".rc", ".report.json"):
        if (src / f"{src_label}{suffix}").is_file():
            shutil.copy(src / f"{src_label}{suffix}", folder / f"{dst_label}{suffix}")


def test_a_set_that_resolves_at_once_exits_0(tmp_path):
    """pip's real success answer given as round 1: resolved without stand-ins."""
    shutil.copy(CAPTURE / "capture.json", tmp_path / "capture.json")
    copy_set("aarch64.npu.round3", "aarch64.npu.round1", tmp_path)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--replay", str(tmp_path), "--platform", "aarch64", "--out", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "aarch64 py3.11 [npu]: resolved yes" in result.stdout
    (r,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert r["resolved"] is True and r["rounds"] == 1 and r["culprits"] == []


def test_an_unreachable_index_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--replay", str(NETWORK), "--platform", "aarch64"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "resolved undecided" in result.stdout and "NameResolutionError" in result.stdout


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda d: (d / "x86_64.npu.round2.rc").unlink(), "x86_64.npu.round2.rc: no captured answer"),
        (lambda d: (d / "aarch64.npu.round3.report.json").write_text("{oops"), "aarch64.npu.round3.report.json: not a pip report"),
        (lambda d: (d / "aarch64.npu.round1.rc").write_text("one\n"), "aarch64.npu.round1.rc: not an exit status"),
        (lambda d: (d / "capture.json").write_text("["), "capture.json: not JSON"),
    ],
)
def test_a_broken_capture_exits_2_naming_the_file(tmp_path, break_it, message):
    folder = tmp_path / "capture"
    shutil.copytree(CAPTURE, folder)
    break_it(folder)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--replay", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_missing_capture_folder_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--replay", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "capture folder not found" in result.stderr
