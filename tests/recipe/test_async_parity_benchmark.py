"""``benchmarks/async_parity.py --analyze-only`` on real runs of the study (tests/verl_ascend/report/data/parity):
the verdict table against sync, its exit status, the plots and results.json, and what a study cut short reports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "verl_ascend" / "report" / "data" / "parity"
CAND = "separate_async_b0"


def analyze(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "benchmarks/async_parity.py", "--arms", f"sync,{CAND}", "--out", str(out),
                           "--analyze-only", *extra], cwd=REPO, capture_output=True, text=True, timeout=300)


def study(tmp_path: Path, candidate: str = CAND) -> Path:
    shutil.copytree(DATA / "sync", tmp_path / "sync")
    shutil.copytree(DATA / candidate, tmp_path / CAND)
    return tmp_path


def test_the_study_table_and_verdict(tmp_path):
    """The verdict is parity's with the study's margin, and the exit status follows it."""
    from verl_ascend.report import parity

    out = analyze(study(tmp_path), "--markdown")
    rows = [line for line in out.stdout.splitlines() if line.startswith("| `")]
    assert [r.split("|")[1].strip() for r in rows] == ["`sync`", f"`{CAND}`"], out.stdout + out.stderr
    spec = parity.load_margin(str(REPO / "recipe" / "dapo_ascend" / "margins" / "parity_async.yaml"))
    runs = {a: [str(p) for p in sorted((tmp_path / a).iterdir())] for a in ("sync", CAND)}
    cmp = parity.compare(parity.load_arm("sync", runs["sync"], spec), parity.load_arm(CAND, runs[CAND], spec), spec)
    assert rows[0].rstrip(" |").endswith("baseline")
    assert rows[1].split("|")[-2].strip().startswith("PASS" if cmp.passed else "FAIL")
    assert out.returncode == (0 if cmp.passed else 2)
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["runs"] for r in results] == [3, 3] and results[1]["staleness_max"] == 0
    assert (tmp_path / "async_parity.png").stat().st_size > 10_000 and (tmp_path / f"parity_{CAND}.png").exists()


def test_the_doctored_arm_fails_and_a_cut_study_is_indicative(tmp_path):
    out = analyze(study(tmp_path / "a", candidate="doctored"))
    assert out.returncode == 2 and "FAIL" in out.stdout, out.stdout + out.stderr
    cut = study(tmp_path / "b")
    shutil.rmtree(cut / CAND / "3")  # its third run never finished
    out = analyze(cut)
    assert "indicative: 2 runs, the protocol asks 3" in out.stdout, out.stdout + out.stderr
