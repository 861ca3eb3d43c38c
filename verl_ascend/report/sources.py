"""Find what a run left behind and say what each file is.

Why: a profiled run scatters its output -- torch traces named ``<role>_<stage>_step<n>_rank<r>_...``
flat in ``global_profiler.save_path``, engine (rollout) traces under
``agent_loop_rollout_replica_<r>/``, torch_npu ``*_ascend_pt`` directories, upstream's metrics JSON
lines somewhere else, Hydra's ``.hydra/config.yaml``. The report takes any mix of directories and
files and sorts them here, by content where names are ambiguous.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from verl_ascend.report.metrics_log import looks_like_metrics_log
from verl_ascend.report.problems import InputProblem
from verl_ascend.report.settings import Settings

ENV_PROFILE_NAMES = ("env_profile.json", "env_profile.yaml", "env_profile.yml")
RUN_CONFIG_NAMES = ("config.yaml",)  # as written by Hydra into .hydra/
# JSON files torch_npu / verl-ascend write next to traces that are not traces.
_NOT_TRACES = re.compile(
    r"^(profiler_info(_\d+)?|profiler_metadata|communication(_matrix)?|report|env_profile)\.json$", re.IGNORECASE
)
_TRACE_NAME = re.compile(r"(trace|\.pt\.trace)", re.IGNORECASE)
_SKIP_DIRS = {"FRAMEWORK", "logs", "__pycache__"}
_SNIFF = 1 << 16
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


@dataclass
class Source:
    kind: str  # "chrome" | "ascend" | "metrics" | "env_profile" | "run_config"
    path: str
    role: str = "train"  # "rollout" | "train" (for traces)
    replica: Optional[int] = None
    rank: Optional[int] = None
    step: Optional[int] = None

    @property
    def label(self) -> str:
        parts = []
        if self.replica is not None:
            parts.append(f"replica{self.replica}")
        if self.rank is not None:
            parts.append(f"rank{self.rank}")
        if not parts:
            parts.append(Path(self.path).name[:40])
        return "/".join(parts)


@dataclass
class Inventory:
    sources: list[Source] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files looked at and left out (not a trace...)
    problems: list[InputProblem] = field(default_factory=list)

    def of(self, kind: str) -> list[Source]:
        return [s for s in self.sources if s.kind == kind]


def _sniff_trace(path: Path) -> bool:
    """Does the head of a JSON file look like a Chrome trace? An object must open a ``traceEvents``
    array early (torch writes it after a few small keys); a bare array must hold events (``"ph"``).
    Tokenizer or model configs that sit next to traces fail this."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=fh) as gz:
                    data = gz.read(_SNIFF)
            else:
                data = fh.read(_SNIFF)
    except (OSError, EOFError):
        return True  # let the reader report the problem with its offset
    data = data.lstrip()
    if data.startswith(b"{"):
        return _TRACE_EVENTS_KEY.search(data) is not None
    if data.startswith(b"["):
        return b'"ph"' in data
    return False


def _is_trace_name(name: str) -> bool:
    low = name.lower()
    return low.endswith((".json", ".json.gz")) and not _NOT_TRACES.match(name)


def _classify(source: Source, rel: str, settings: Settings) -> Source:
    replica = settings.rollout_replica(rel)
    if replica is not None:
        source.role = "rollout"
        source.replica = replica
    name = Path(source.path).name
    source.rank = settings.first_int(settings.rank_res, name)
    source.step = settings.first_int(settings.step_res, name)
    return source


def _ascend_rank(directory: Path, settings: Settings) -> Optional[int]:
    for child in directory.iterdir():
        rank = settings.first_int(settings.rank_res, child.name)
        if rank is not None and child.name.startswith("profiler_info"):
            return rank
    return None


def _add_ascend(inv: Inventory, directory: Path, rel: str, settings: Settings) -> None:
    out = directory / "ASCEND_PROFILER_OUTPUT"
    texts = [n for n in ("kernel_details.csv", "step_trace_time.csv", "trace_view.json") if (out / n).is_file()]
    if texts:
        src = _classify(Source("ascend", str(directory)), rel, settings)
        src.rank = _ascend_rank(directory, settings)
        inv.sources.append(src)
        return
    dbs = sorted(out.glob("*.db")) if out.is_dir() else []
    raw = [p.name for p in directory.glob("PROF_*")]
    if dbs:
        inv.problems.append(InputProblem(
            str(directory),
            "holds only the Db export (" + ", ".join(p.name for p in dbs) + "): upstream verl's npu tool exports "
            "ExportType.Db, which this report does not read. Re-export it as text with "
            f"`verl-ascend parse-traces {directory} --export-type text`, then rerun the report"))
    elif raw:
        inv.problems.append(InputProblem(
            str(directory),
            "raw NPU profiler data that was never parsed (the online parse failed or analysis was off): run "
            f"`verl-ascend parse-traces {directory}` and rerun the report"))
    else:
        inv.problems.append(InputProblem(str(directory), "a torch_npu output directory with nothing readable in it"))


def discover(paths: list[str | Path], settings: Settings, exclude: Optional[Path] = None) -> Inventory:
    """Walk ``paths`` (directories or files) and sort what is found.

    Inputs that do not exist are problems. Files given explicitly are taken at their word (a ``.json``
    is read as a trace, a ``.jsonl`` as a metrics log) so that a broken file is reported rather than
    skipped; inside directories, JSON files are sniffed first.
    """
    inv = Inventory()
    exclude = exclude.resolve() if exclude else None
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            inv.problems.append(InputProblem(str(p), "does not exist; expected a run's profile directory, a trace "
                                                     "file, a torch_npu *_ascend_pt directory or a metrics .jsonl"))
            continue
        if p.is_file():
            _add_file(inv, p, str(p), settings, explicit=True)
            continue
        if (p / "ASCEND_PROFILER_OUTPUT").is_dir() or p.name.endswith("_ascend_pt"):
            _add_ascend(inv, p, str(p), settings)
            continue
        for root, dirs, files in os.walk(p):
            rootp = Path(root)
            if exclude and rootp.resolve() == exclude:
                dirs[:] = []
                continue
            kept = []
            for d in sorted(dirs):
                child = rootp / d
                rel = str(child.relative_to(p.parent))
                if d in _SKIP_DIRS or d.startswith("PROF_"):
                    continue
                if exclude and child.resolve() == exclude:
                    continue
                if (child / "ASCEND_PROFILER_OUTPUT").is_dir() or d.endswith("_ascend_pt"):
                    _add_ascend(inv, child, rel, settings)
                    continue
                kept.append(d)
            dirs[:] = kept
            for name in sorted(files):
                fp = rootp / name
                rel = str(fp.relative_to(p.parent))
                if rootp.name == ".hydra" and name in RUN_CONFIG_NAMES:
                    inv.sources.append(Source("run_config", str(fp)))
                    continue
                _add_file(inv, fp, rel, settings, explicit=False)
    return inv


def _add_file(inv: Inventory, fp: Path, rel: str, settings: Settings, explicit: bool) -> None:
    name = fp.name
    low = name.lower()
    if low in ENV_PROFILE_NAMES:
        inv.sources.append(Source("env_profile", str(fp)))
    elif low.endswith(".jsonl"):
        if explicit or looks_like_metrics_log(fp):
            inv.sources.append(Source("metrics", str(fp)))
        else:
            inv.skipped.append(str(fp))
    elif _is_trace_name(name) or (explicit and low.endswith(".gz")):
        if explicit or _TRACE_NAME.search(name) or _sniff_trace(fp):
            inv.sources.append(_classify(Source("chrome", str(fp)), rel, settings))
        else:
            inv.skipped.append(str(fp))
    elif explicit and low.endswith((".yaml", ".yml")):
        inv.sources.append(Source("run_config", str(fp)))
    elif explicit:
        inv.problems.append(InputProblem(str(fp), "unknown kind of file; expected a Chrome trace (.json, .json.gz), a "
                                                  "metrics log (.jsonl), env_profile.json or a run config (.yaml)"))
