"""One-command bottleneck report of a profiled run: ``verl-ascend report DIR [DIR...]``.

Reads what a run leaves -- torch / vLLM Chrome traces (``.json``, ``.json.gz``), torch_npu
``*_ascend_pt`` text exports (``step_trace_time.csv``, ``kernel_details.csv``,
``operator_details.csv``, or ``trace_view.json``), upstream's metrics JSON lines, the env profile and
Hydra config the run recorded -- and prints the table the source article builds by hand:

1. time per phase and the train:rollout ratio;
2. the rollout tail (share of rollout wall time with fewer than half of the replicas/ranks still
   generating), stragglers and free time inside the tail;
3. host-bound free time;
4. communication not overlapped with computation;
5. the top kernels / ops;
6. an "optimisations active" checklist;
7. in upstream's asynchronous trainer modes (colocate_async, separate_async) only: rollout and training
   lanes on one time axis, overlap, idle time per pool, weight-sync time and staleness
   (``async_modes.py``; a sync run's report has no such section).

The same data is written as ``report.json`` and ``report.txt``, with ``rollout_timeline.png`` and
``step_breakdown.png`` (and ``async_timeline.png`` in the asynchronous modes), into ``--out`` (default ``<first DIR>/profile_report``). Files are written
to temporary names and renamed, after all reading is done.

Exit status, the one table (``verl_ascend.checks.exits``): 0 ``OK`` all inputs read; 2 ``REFUSED``
some inputs were damaged (the report is written from the rest, each damaged input listed under
"Problems" and on stderr, numbers from it partial), nothing usable, bad arguments or settings, or any
damage under ``--strict`` (nothing written then); 1 ``FAILED`` the report could not be written.
Before the one table a damaged input was 1 and an unwritable folder 2: 1 now always means the tool
broke, as for every other command.

Traces are streamed (see ``chrome_trace.py``): memory stays flat whatever their size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

from verl_ascend import trainer_mode
from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.cli import parser
from verl_ascend.memory import measured
from verl_ascend.report import analysis, async_modes, checklist
from verl_ascend.report.lanes import LaneStats, analyze_ascend_dir, analyze_chrome_trace
from verl_ascend.report.metrics_log import read_metrics_log, read_step_values
from verl_ascend.report.problems import InputFormatError, InputProblem
from verl_ascend.report.run_settings import RunSettings
from verl_ascend.report.settings import Settings, SettingsError, load_settings
from verl_ascend.report.sources import Source, discover

SCHEMA = "verl-ascend/profile-report/v1"


class Report:
    """Everything computed from the inputs; ``data`` is what goes into report.json."""

    def __init__(self, data: dict, lanes: list[LaneStats], rounds: list[list[LaneStats]], problems: list[InputProblem],
                 async_view: Optional[async_modes.AsyncView] = None):
        self.data = data
        self.lanes = lanes
        self.rounds = rounds
        self.problems = problems
        self.async_view = async_view

    @property
    def usable(self) -> bool:
        return bool(self.lanes) or bool(self.data.get("phases"))


def _lane_for(src: Source) -> LaneStats:
    return LaneStats(kind=src.role, label=src.label, source=src.path, fmt=src.kind, replica=src.replica,
                     rank=src.rank, step=src.step)


def build_report(paths: list[str | Path], settings: Optional[Settings] = None, *, env_profiles=(), run_configs=(),
                 exclude: Optional[Path] = None, top_n: Optional[int] = None,
                 mode: Optional[str] = None) -> Report:
    """Read every input under ``paths`` and compute the report (no output is written)."""
    settings = settings or load_settings()
    inv = discover(list(paths) + list(env_profiles) + list(run_configs), settings, exclude=exclude)
    problems: list[InputProblem] = list(inv.problems)
    lanes: list[LaneStats] = []
    for src in inv.sources:
        if src.kind not in ("chrome", "ascend"):
            continue
        lane = _lane_for(src)
        try:
            if src.kind == "chrome":
                analyze_chrome_trace(src.path, lane, settings)
            else:
                analyze_ascend_dir(src.path, lane, settings)
        except InputFormatError as e:
            problems.append(e.problem)
            continue
        problems.extend(lane.problems)
        lanes.append(lane)
    logs = []
    values: dict[int, dict] = {}  # every metric of every step, for the asynchronous modes' section
    for src in inv.of("metrics"):
        try:
            log = read_metrics_log(src.path)
        except InputFormatError as e:
            problems.append(e.problem)
            continue
        problems.extend(log.problems)
        logs.append(log)
        try:
            for step, record in read_step_values(src.path)[0].items():
                values.setdefault(step, {}).update(record)
        except InputFormatError:
            pass  # no valid record: read_metrics_log has said so
    run = RunSettings()
    for src in inv.of("env_profile"):
        run.add_env_profile(src.path)
    for src in inv.of("run_config"):
        run.add_run_config(src.path)
    problems.extend(run.problems)

    rollout = [l for l in lanes if l.kind == "rollout"]
    train = [l for l in lanes if l.kind == "train"]
    rounds = analysis.rollout_rounds(rollout)
    phases = analysis.phases_from_metrics(logs, settings) or analysis.phases_from_traces(rounds, train)
    n = top_n or settings.top_n
    data = {
        "schema": SCHEMA,
        "inputs": {
            "paths": [str(p) for p in paths],
            "traces": [{"path": l.source, "kind": l.kind, "label": l.label, "format": l.fmt, "events": l.events,
                        "partial": l.partial} for l in lanes],
            "metrics_logs": [log.path for log in logs],
            "env_profiles": [s for s in run.sources if s in {x.path for x in inv.of("env_profile")}],
            "run_configs": [s for s in run.sources if s in {x.path for x in inv.of("run_config")}],
            "skipped": inv.skipped,
        },
        "phases": phases,
        "rollout_tail": analysis.rollout_tail(rounds, settings, phases) if rollout or phases else None,
        "time_split": {"rollout": analysis.time_split(rollout), "train": analysis.time_split(train)},
        "top_ops": {"rollout": analysis.top_ops(rollout, n), "train": analysis.top_ops(train, n)},
        "checklist": checklist.build_checklist(lanes, run, settings),
        "lanes": [l.summary() for l in lanes],
        "problems": [p.to_dict() for p in problems],
    }
    view = async_modes.build(mode, run, values, lanes, settings)
    if view is not None:
        data["async"] = view.data
    if run.configs and measured.measured(values):  # the first host run calibrates the plan
        data["memory"] = measured.compare_config(run.configs[0], values)
    return Report(data, lanes, rounds, problems, view)


# ================================================================================================ text
def _pct(x: Optional[float]) -> str:
    return "  n/a" if x is None else f"{100 * x:5.1f}%"


def render_text(report: Report) -> str:
    d = report.data
    out: list[str] = ["verl-ascend profile report", ""]
    inp = d["inputs"]
    kinds = {"rollout": 0, "train": 0}
    for t in inp["traces"]:
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
    out.append(f"inputs: {len(inp['traces'])} trace(s) (rollout {kinds['rollout']}, train {kinds['train']}), "
               f"{len(inp['metrics_logs'])} metrics log(s), env profile: {', '.join(inp['env_profiles']) or 'none'}, "
               f"run config: {', '.join(inp['run_configs']) or 'none'}")
    out.append("")

    # 1. phases
    ph = d.get("phases")
    out.append("1. Time per phase")
    if not ph:
        out.append("   n/a: no metrics log and no timed traces")
    else:
        src = "metrics log" if ph["source"] == "metrics" else "traces"
        out.append(f"   mean over {len(ph['steps'])} step(s), from the {src}")
        out.append(f"   {'phase':<18}{'mean s':>10}{'share of step':>15}")
        for name in ph["phases"] + ([ph["total_phase"]] if ph.get("total_phase") else []):
            if name in ph["mean_s"]:
                share = ph["share_of_step"].get(name)
                out.append(f"   {name:<18}{ph['mean_s'][name]:>10.3f}{_pct(share):>15}")
        ratio = ph.get("rollout_per_train")
        out.append(f"   train : rollout = 1 : {ratio:.2f}" if ratio else "   train : rollout = n/a")
        out.append(f"   (train = {' + '.join(ph['train_phases']) or 'n/a'}; rollout = {' + '.join(ph['rollout_phases']) or 'n/a'})")
        out.append("   article: 1 : 2.5 at 2K-token responses, 1 : 4.5 at 4K -- above ~1 : 1 the run is rollout-bound: "
                   "rollout optimisations (V1 + chunked prefill, mc2 at TP=8, task queue / graph mode) pay most.")
    out.append("")

    # 2. tail
    tail = d.get("rollout_tail")
    out.append("2. Rollout tail")
    if not tail or not tail["rounds"]:
        proxy = tail.get("metrics_straggler_proxy") if tail else None
        out.append("   n/a: no rollout traces" + (f"; metrics straggler proxy (max-mean)/max of per-sample generation "
                                                      f"time = {_pct(proxy).strip()}" if proxy is not None else ""))
    else:
        out.append(f"   {'round':<8}{'lanes':>6}{'wall s':>10}{'tail s':>10}{'tail':>8}{'stragglers':>12}{'free in tail':>14}")
        for i, r in enumerate(tail["rounds"]):
            name = f"step {r['step']}" if r["step"] is not None else f"#{i}"
            out.append(f"   {name:<8}{r['n_lanes']:>6}{r['wall_s']:>10.3f}{r['tail_s']:>10.3f}{_pct(r['tail_fraction']):>8}"
                       f"{_pct(r['straggler_fraction']):>12}{_pct(r['free_fraction_in_tail']):>14}")
        out.append(f"   tail = {tail['definition']}")
        if tail.get("note"):
            out.append(f"   note: {tail['note']}")
        if tail.get("metrics_straggler_proxy") is not None:
            out.append(f"   metrics straggler proxy (max-mean)/max of per-sample generation time: "
                       f"{_pct(tail['metrics_straggler_proxy']).strip()}")
        out.append("   article: tail over 30% of rollout time -> fix load balance (shorter max length, partial/async "
                   "rollout); a host-bound tail (high free time in it) also gains from task queue level 2.")
    out.append("")

    # 3 + 4. free time, communication
    ts = d["time_split"]
    out.append("3. Host-bound free time (device idle inside each lane's active window; CPU traces: no op running)")
    for kind in ("rollout", "train"):
        x = ts.get(kind)
        if x:
            out.append(f"   {kind:<8} {_pct(x['free_fraction'])} of {x['window_s']:.3f} s over {x['lanes']} lane(s) "
                       f"[{', '.join(x['basis'])}; {', '.join(x['overlap_basis'])}]")
        else:
            out.append(f"   {kind:<8} n/a")
    out.append("   article: free time over 20% is host-bound launch overhead -> TASK_QUEUE_ENABLE=2 (eager) or graph mode.")
    out.append("")
    out.append("4. Communication not overlapped with computation")
    for kind in ("rollout", "train"):
        x = ts.get(kind)
        if x:
            ov = x["comm_overlapped_share"]
            out.append(f"   {kind:<8} {_pct(x['comm_not_overlapped_fraction'])} of the window "
                       f"({x['comm_not_overlapped_s']:.3f} s of {x['comm_s']:.3f} s communication; "
                       f"{'n/a' if ov is None else f'{100 * ov:.0f}%'} overlapped)")
        else:
            out.append(f"   {kind:<8} n/a")
    out.append("   article: high un-overlapped communication -> mc2 (MatmulAllReduce) at TP=8, HCCL AIV expansion, "
               "FSDP forward prefetch / fsdp_size.")
    out.append("")

    # 5. top ops
    out.append("5. Top kernels / ops")
    for kind in ("rollout", "train"):
        x = d["top_ops"].get(kind)
        if not x:
            out.append(f"   {kind}: n/a")
            continue
        out.append(f"   {kind} ({x['basis']}, {x['total_s']:.3f} s in {x['distinct']} distinct)")
        out.append(f"     {'name':<48}{'count':>8}{'total ms':>11}{'avg us':>10}{'share':>8}")
        for r in x["rows"]:
            name = r["name"] if len(r["name"]) <= 47 else r["name"][:44] + "..."
            out.append(f"     {name:<48}{r['count']:>8}{r['total_ms']:>11.3f}{(r['avg_us'] or 0):>10.2f}{_pct(r['share']):>8}")
    out.append("")

    # 6. checklist
    out.append("6. Optimisations active")
    for item in d["checklist"]:
        out.append(f"   [{item['status']:^8}] {item['label']}: {item['detail']}")
        if item.get("fix"):
            out.append(f"              -> {item['fix']}")
    out.append("")

    if d.get("async"):
        out.extend(async_modes.render(d["async"]))
    if d.get("memory"):
        out.extend(["", *measured.lines(d["memory"])])
        out.append("")

    if report.problems:
        out.append(f"Problems with the inputs ({len(report.problems)})")
        for p in report.problems:
            out.append(f"   {p}")
        out.append("")
    return "\n".join(out)


# ================================================================================================ output
def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_outputs(report: Report, out_dir: Path, plots: bool = True) -> list[Path]:
    """report.json, report.txt and the plots, each written whole or not at all."""
    from verl_ascend.report import plots as plotting

    written = []
    d = dict(report.data)
    if plots:
        tails = (d.get("rollout_tail") or {}).get("rounds", [])
        jobs = [("rollout_timeline.png", lambda p: plotting.rollout_timeline(report.rounds, tails, p))]
        if d.get("phases"):
            jobs.append(("step_breakdown.png", lambda p: plotting.step_breakdown(d["phases"], p)))
        if report.async_view is not None:
            jobs.append(("async_timeline.png", lambda p: plotting.async_timeline(report.async_view, p)))
        for name, draw in jobs:
            try:
                if draw(out_dir / name):
                    written.append(out_dir / name)
            except OSError:
                raise
            except Exception as e:  # a plot is a view of report.json: never lose the numbers over it
                print(f"warning: could not draw {name} ({type(e).__name__}: {e}); report.json has the data",
                      file=sys.stderr)
    d["outputs"] = [p.name for p in written] + ["report.json", "report.txt"]
    _write_text_atomic(out_dir / "report.json", json.dumps(d, indent=2, default=_json_default) + "\n")
    _write_text_atomic(out_dir / "report.txt", render_text(report) + "\n")
    return written + [out_dir / "report.json", out_dir / "report.txt"]


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, set):
        return sorted(o)
    return str(o)


def default_out_dir(paths: list[str]) -> Path:
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / "profile_report"


# ================================================================================================ CLI
def _positive_int_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: accepted: an integer >= 1")
    return value


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = parser(
        "report",
        "Bottleneck report of a profiled verl run (train:rollout ratio, rollout tail, free time,\n"
        "un-overlapped communication, top kernels, optimisations checklist); the table on stdout, and\n"
        "report.json, report.txt and plots in --out.",
        ["verl-ascend report outputs/dapo_tiny_cpu/metrics.jsonl --no-plots   # the metrics log alone",
         "verl-ascend report outputs/profile --out /tmp/report --strict   # every input intact, or nothing written"],
    )
    ap.add_argument("paths", nargs="+", help="profile directories (global_profiler.save_path), trace files, "
                                             "*_ascend_pt directories, metrics .jsonl files")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default: <first DIR>/profile_report)")
    ap.add_argument("--env-profile", action="append", default=[], help="the run's env_profile.json/.yaml (if not under DIR)")
    ap.add_argument("--run-config", action="append", default=[], help="the run's composed config (.hydra/config.yaml)")
    ap.add_argument("--settings", type=Path, default=None, help="YAML merged over the report defaults (defaults.yaml)")
    ap.add_argument("--trainer-mode", dest="mode", choices=trainer_mode.MODES, default=None,
                    help=f"upstream's {trainer_mode.KEY} of the run (default: the run config's, else told from "
                         "the metrics and traces)")
    ap.add_argument("--top", type=_positive_int_arg, default=None, help="rows in the top kernels/ops tables (>= 1)")
    ap.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    ap.add_argument("--strict", action="store_true", help="any damaged input is fatal (exit 2, nothing written)")
    ap.add_argument("--quiet", action="store_true", help="do not print the table")
    return ap.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    try:
        settings = load_settings(args.settings)
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return REFUSED
    out_dir = args.out or default_out_dir(args.paths)
    report = build_report(args.paths, settings, env_profiles=args.env_profile, run_configs=args.run_config,
                          exclude=out_dir, top_n=args.top, mode=args.mode)
    for p in report.problems:
        print(f"error: {p}", file=sys.stderr)
    if not report.usable:
        print("error: nothing to report: no readable trace, torch_npu output or metrics log under "
              f"{', '.join(args.paths)}; expected a run's global_profiler.save_path (Chrome traces, *_ascend_pt "
              "directories) and/or its metrics .jsonl", file=sys.stderr)
        return REFUSED
    if args.strict and report.problems:
        print(f"error: {len(report.problems)} damaged input(s) and --strict: nothing written", file=sys.stderr)
        return REFUSED
    try:
        written = write_outputs(report, out_dir, plots=not args.no_plots)
    except OSError as e:
        print(f"error: cannot write the report to {out_dir}: {e.strerror or e}", file=sys.stderr)
        return FAILED
    if not args.quiet:
        print(render_text(report))
        print("written: " + ", ".join(str(p) for p in written))
    return REFUSED if report.problems else OK
