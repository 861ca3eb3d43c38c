"""Offline parsing of raw Ascend profiler data: ``verl-ascend parse-traces DIR [options]``.

Why: torch_npu parses a trace when profiling stops. For a large rollout trace that parse can fail
(memory, time, permissions) and leave only raw ``PROF_*`` data; upstream verl's npu tool also exports
``ExportType.Db`` only, which the report does not read. torch_npu's offline entry point
(``torch_npu.profiler.profiler.analyse``) re-parses such directories, in parallel; this wrapper finds
the ``*_ascend_pt`` directories under DIR, chooses the process count, asks for the text export the
report reads, and says plainly what it did -- or why it cannot run here (torch_npu and CANN are
needed; a CPU machine has neither: copy the directories to an NPU host).

Exit status, the one table (``verl_ascend.checks.exits``): 0 ``OK`` parsed; 2 ``REFUSED`` nothing to
parse, bad arguments, or torch_npu unavailable here; 1 ``FAILED`` torch_npu's parse left some
directories without ASCEND_PROFILER_OUTPUT (each named, with its logs folder).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Callable, Optional

from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.cli import parser


class OfflineParseError(RuntimeError):
    """Offline parsing cannot run (torch_npu missing, nothing to parse, bad arguments)."""


def find_profiler_dirs(root: str | Path) -> list[Path]:
    """The torch_npu result directories (``*_ascend_pt``) at or under ``root``."""
    root = Path(root)
    if not root.exists():
        raise OfflineParseError(f"{root} does not exist; expected a directory holding *_ascend_pt profiler output")
    if root.is_file():
        raise OfflineParseError(f"{root} is a file; expected a directory holding *_ascend_pt profiler output")
    if root.name.endswith("_ascend_pt"):
        return [root]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        keep = []
        for d in dirnames:
            if d.endswith("_ascend_pt"):
                found.append(Path(dirpath) / d)
            elif not d.startswith("PROF_") and d not in ("ASCEND_PROFILER_OUTPUT", "FRAMEWORK"):
                keep.append(d)
        dirnames[:] = keep
    return sorted(found)


def default_processes(n_dirs: int) -> int:
    """torch_npu's own default is half the cores; no point in more processes than directories."""
    half = max((os.cpu_count() or 2) // 2, 1)
    return max(1, min(half, n_dirs))


def load_analyse() -> Callable:
    """torch_npu's offline ``analyse`` function, or OfflineParseError saying why it is unavailable."""
    try:
        from torch_npu.profiler.profiler import analyse
    except ImportError as e:
        raise OfflineParseError(
            f"torch_npu is not installed here ({e}). Offline parsing runs torch_npu's analyse(), which needs torch_npu "
            "and the CANN toolkit: run this command on an Ascend host (or copy the *_ascend_pt directories to one)."
        ) from None
    except Exception as e:  # torch_npu present but unusable, e.g. CANN libraries missing
        raise OfflineParseError(
            f"torch_npu cannot be imported here ({type(e).__name__}: {e}). Offline parsing needs a working torch_npu "
            "with the CANN toolkit (source CANN's set_env.sh first)."
        ) from None
    return analyse


def analyse_offline(root: str | Path, processes: Optional[int] = None, export_type: str = "text",
                    analyse: Optional[Callable] = None) -> list[Path]:
    """Parse every ``*_ascend_pt`` directory under ``root``; return those still unparsed afterwards."""
    dirs = find_profiler_dirs(root)
    if not dirs:
        raise OfflineParseError(f"no *_ascend_pt directory under {root}: nothing to parse (torch_npu names its output "
                                "{hostname}_{pid}_{timestamp}_ascend_pt)")
    if processes is not None and processes < 1:
        raise OfflineParseError(f"--processes must be at least 1, got {processes}")
    n = processes or default_processes(len(dirs))
    analyse = analyse or load_analyse()
    kwargs = {"max_process_number": n}
    if "export_type" in inspect.signature(analyse).parameters:
        kwargs["export_type"] = [export_type]
    elif export_type != "text":
        print(f"warning: this torch_npu's analyse() has no export_type; it uses the type recorded at collection",
              file=sys.stderr)
    # analyse() walks one directory level for *_ascend_pt results; call it once per parent.
    parents = sorted({d.parent for d in dirs})
    for parent in parents:
        print(f"parsing {parent} with {n} process(es), export {kwargs.get('export_type', 'as collected')}", flush=True)
        analyse(profiler_path=str(parent), **kwargs)
    return [d for d in dirs if not (d / "ASCEND_PROFILER_OUTPUT").is_dir()]


def main(argv: Optional[list[str]] = None) -> int:
    ap = parser("parse-traces", "Parse raw Ascend profiler data (*_ascend_pt) offline with torch_npu (an Ascend host).",
                ["verl-ascend parse-traces outputs/profile -j 8 && verl-ascend report outputs/profile"])
    ap.add_argument("path", help="a *_ascend_pt directory or a directory holding them (e.g. global_profiler.save_path)")
    ap.add_argument("--processes", "-j", type=int, default=None,
                    help="parallel parse processes (default: half the cores, at most one per directory)")
    ap.add_argument("--export-type", choices=("text", "db"), default="text",
                    help="text: CSV + trace_view.json, what the report reads (default); db: the .db files only")
    args = ap.parse_args(argv)
    try:
        left = analyse_offline(args.path, args.processes, args.export_type)
    except OfflineParseError as e:
        print(f"error: {e}", file=sys.stderr)
        return REFUSED
    if left:
        for d in left:
            print(f"error: {d}: still no ASCEND_PROFILER_OUTPUT after parsing; see {d}/logs", file=sys.stderr)
        return FAILED
    print(f"done: read the result with `verl-ascend report {args.path}`")
    return OK
