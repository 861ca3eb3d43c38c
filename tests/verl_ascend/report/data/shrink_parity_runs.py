"""Copy real runs of benchmarks/async_parity.py into the small fixture under parity/ (how the committed files were made).

    python tests/verl_ascend/report/data/shrink_parity_runs.py STUDY_OUT BASELINE_ARM CANDIDATE_ARM [MARGIN_YAML]

STUDY_OUT is the study's ``--out`` (``<arm>/<seed>/<experiment>/``), and the copy keeps that layout. For each
arm and seed it keeps the run's own records as written (``resume.jsonl``, ``data_order.json``, ``status.json``;
the study's ``wall_s.txt``) and, of each metrics line, the step
and the metrics ``verl-ascend parity`` reads (KEEP_METRICS): values untouched, the rest of the ~100 keys
a step left out. ``doctored/`` is the last arm (the candidate) shifted down by twice the margin (parity_async.yaml's) on
its primary metric, every other byte as in the copy: the test's case that must exit 2. The margin is
MARGIN_YAML's (default: the study's, recipe/dapo_ascend/margins/parity_async.yaml), copied to ``margin.yaml``.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO))

from verl_ascend.report.parity import load_margin  # noqa: E402

KEEP_METRICS = re.compile(r"^(reward_extra/acc/|timing_s/step$|actor/grad_norm$|actor/entropy$|response_length/mean$|"
                          r"training/off_policy/(trajectory_staleness/mean|evicted_samples)$|rollout_corr/)")
PRIMARY = "reward_extra/acc/mean"
HERE = Path(__file__).resolve().parent / "parity"


def shrink_run(run: Path, out: Path, shift: float = 0.0) -> None:
    """``run``: ``<seed>/<experiment>/``; ``out``: the same two levels in the fixture."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("resume.jsonl", "data_order.json", "status.json"):
        shutil.copyfile(run / name, out / name)
    shutil.copyfile(run.parent / "wall_s.txt", out.parent / "wall_s.txt")
    lines = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        data = {k: v for k, v in rec["data"].items() if KEEP_METRICS.match(k)}
        if shift and PRIMARY in data:
            data[PRIMARY] = data[PRIMARY] - shift
        lines.append(json.dumps({"step": rec["step"], "data": data}))
    (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def main(study: str, base: str, cand: str, margin_file: str = "") -> None:
    margin_file = margin_file or str(REPO / "recipe/dapo_ascend/margins/parity_async.yaml")
    margin = load_margin(margin_file).margin
    arms = (base, cand)
    shutil.rmtree(HERE, ignore_errors=True)
    HERE.mkdir(parents=True)
    shutil.copyfile(margin_file, HERE / "margin.yaml")
    for arm in arms:
        for seed_dir in sorted(Path(study, arm).iterdir()):
            run = next(seed_dir.glob("*/metrics.jsonl")).parent
            shrink_run(run, HERE / arm / seed_dir.name / run.name)
            if arm == arms[-1]:
                shrink_run(run, HERE / "doctored" / seed_dir.name / run.name, shift=2 * margin)


if __name__ == "__main__":
    main(*sys.argv[1:])
