"""``verl-ascend parity`` on real runs: the study's sync arm against an async arm (3 seeds each), and a doctored copy.

The fixtures under data/parity/ are real runs of benchmarks/async_parity.py (data/shrink_parity_runs.py: the
run's own records as written, each metrics line cut to the metrics the command reads). ``doctored/`` is the
candidate arm with its primary metric shifted down by twice the margin: it must exit 2 naming the metric,
and its interval must move by exactly that shift.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verl_ascend.report import parity

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data" / "parity"
MARGIN = DATA / "margin.yaml"  # the margin the doctored copy was shifted by twice of
BASE, CAND = "sync", "separate_async_b0"
PRIMARY = "reward_extra/acc/mean"


def runs(arm: str) -> list[str]:
    return [str(p) for p in sorted((DATA / arm).iterdir())]


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_ascend", "parity", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def compare(base: list[str], cand: list[str], margin: Path = MARGIN):
    spec = parity.load_margin(str(margin))
    return parity.compare(parity.load_arm("b", base, spec), parity.load_arm("c", cand, spec), spec), spec


def test_real_arms_pass_and_the_doctored_copy_fails_naming_the_metric(tmp_path):
    ok = cli("--baseline", *runs(BASE), "--candidate", *runs(CAND), "--margin", str(MARGIN),
             "--plot", str(tmp_path / "p.png"), "--json", str(tmp_path / "p.json"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "parity: PASS" in ok.stdout and (tmp_path / "p.png").stat().st_size > 10_000
    bad = cli("--baseline", *runs(BASE), "--candidate", *runs("doctored"), "--margin", str(MARGIN), "--no-plot")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert f"parity: FAIL: {PRIMARY} " in bad.stdout
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["passed"] is True and report["metric"] == PRIMARY
    assert report["arms"]["candidate"]["modes"] == ["separate_async"] * 3


def test_doctored_interval_moves_by_exactly_twice_the_margin():
    real, spec = compare(runs(BASE), runs(CAND))
    doctored, _ = compare(runs(BASE), runs("doctored"))
    for stat in spec.statistics:
        assert doctored.diffs[stat].low == pytest.approx(real.diffs[stat].low - 2 * spec.margin, abs=1e-9)
        assert doctored.diffs[stat].delta == pytest.approx(real.diffs[stat].delta - 2 * spec.margin, abs=1e-9)
    assert doctored.failed and all(f.startswith(PRIMARY) for f in doctored.failed)


def test_statistics_are_those_of_the_files():
    """final = mean of the last 3 steps, max, area per step: recomputed here from the JSON lines."""
    cmp, spec = compare(runs(BASE), runs(CAND))

    def per_run(path):
        rows = [json.loads(x) for x in next(Path(path).glob("*/metrics.jsonl")).read_text().splitlines()]
        v = np.array([r["data"][PRIMARY] for r in rows if r["step"] in cmp.steps])
        return v[-3:].mean(), v.max(), ((v[1:] + v[:-1]) / 2).sum() / (len(v) - 1)

    base = np.array([per_run(p) for p in runs(BASE)])
    cand = np.array([per_run(p) for p in runs(CAND)])
    for i, stat in enumerate(("final", "max", "auc")):
        assert cmp.diffs[stat].delta == pytest.approx(cand[:, i].mean() - base[:, i].mean(), abs=1e-12)
        assert cmp.diffs[stat].low <= cmp.diffs[stat].delta <= cmp.diffs[stat].high
    again, _ = compare(runs(BASE), runs(CAND))  # seeded: the same interval every time
    assert again.diffs["final"].low == cmp.diffs["final"].low


def test_settings_come_from_each_runs_records():
    arm = parity.load_arm("c", runs(CAND), parity.load_margin(str(MARGIN)))
    assert [r.seed for r in arm.runs] == [1, 2, 3]
    assert {r.settings["trainer.v1.sampler.max_off_policy_threshold"] for r in arm.runs} == {1}
    assert "staleness bound 0" in arm.label()


def _copy_arm(arm: str, dst: Path) -> list[str]:
    shutil.copytree(DATA / arm, dst)
    return [str(p) for p in sorted(dst.iterdir())]


@pytest.mark.parametrize("case", ["missing", "two_runs", "metric_missing", "metric_differs", "same_seed", "torn",
                                  "margin_key"])
def test_bad_input_is_refused_naming_the_file(tmp_path, case):
    base, cand = runs(BASE), _copy_arm(CAND, tmp_path / "cand")
    margin, culprit = MARGIN, None
    if case == "missing":
        cand[0] = culprit = str(tmp_path / "nowhere" / "metrics.jsonl")
    elif case == "two_runs":
        cand, culprit = cand[:2], "at least 3 runs"
    elif case == "metric_missing":  # one run lacks every primary metric
        path = next(Path(cand[1]).glob("*/metrics.jsonl"))
        path.write_text(path.read_text().replace(f'"{PRIMARY}"', '"reward_extra/acc/other"'))
        culprit = str(path)
    elif case == "metric_differs":  # the candidate's runs log another accuracy than the baseline's
        for run in cand:
            path = next(Path(run).glob("*/metrics.jsonl"))
            path.write_text(path.read_text().replace(f'"{PRIMARY}"', '"reward_extra/acc/sampled_mean"'))
        culprit = "the arms' primary metrics differ"
    elif case == "same_seed":
        first, third = (next(Path(c).glob("*/metrics.jsonl")).parent for c in (cand[0], cand[2]))
        for name in ("data_order.json", "resume.jsonl"):
            shutil.copyfile(first / name, third / name)
        culprit = f"{third / 'metrics.jsonl'} both ran with seed"
    elif case == "torn":
        path = next(Path(cand[2]).glob("*/metrics.jsonl"))
        path.write_text(path.read_text() + '{"step": 21, "data": {"reward_')
        culprit = f"{path}:"
    elif case == "margin_key":
        margin = tmp_path / "m.yaml"
        margin.write_text(MARGIN.read_text() + "margn: 1\n")
        culprit = "unknown key(s) margn"
    out = cli("--baseline", *base, "--candidate", *cand, "--margin", str(margin), "--no-plot")
    assert out.returncode == 2, out.stdout + out.stderr
    assert culprit in out.stderr and "parity: PASS" not in out.stdout, out.stderr
