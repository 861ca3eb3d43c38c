"""Readers for the CSV files of the Ascend PyTorch Profiler's text export (``ASCEND_PROFILER_OUTPUT``).

Why: torch_npu parses a trace into per-kernel and per-step tables that already answer the article's
questions (``step_trace_time.csv`` has Computing / Communication(Not Overlapped) / Free per step), and
those tables are far smaller than ``trace_view.json``. Column names follow the Ascend PyTorch Profiler
user guide (Ascend/pytorch ``docs/en/ascend_pytorch_profiler``); they are matched after dropping
spaces and case and reading "µs"/"μs" as "us", because releases differ in exactly those details
(``Communication (Not Overlapped)`` vs ``Communication(Not Overlapped)``). Numbers may carry a trailing
tab (torch_npu writes one to keep spreadsheets from rounding timestamps) or read ``N/A``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from verl_ascend.report.problems import InputFormatError, InputProblem

STEP_TRACE = "step_trace_time.csv"
KERNEL_DETAILS = "kernel_details.csv"
OPERATOR_DETAILS = "operator_details.csv"


def norm_header(name: str) -> str:
    return "".join(name.split()).lower().replace("µ", "u").replace("μ", "u").lstrip("\ufeff")


def _number(raw: Optional[str]) -> Optional[float]:
    """Parse a numeric cell; None for empty / N/A. Raises ValueError for anything else."""
    if raw is None:
        return None
    text = raw.strip()
    if not text or text.upper() in ("N/A", "NA", "-", "NONE", "NULL"):
        return None
    return float(text)


class _Table:
    """A CSV file read row by row with normalised headers and precise error locations."""

    def __init__(self, path: str | Path, required: dict[str, str], what: str):
        self.path = str(path)
        self.required = required  # normalised key -> display name
        self.what = what
        self.problems: list[InputProblem] = []

    def rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        try:
            fh = open(self.path, newline="", encoding="utf-8-sig")
        except OSError as e:
            raise InputFormatError(InputProblem(self.path, f"cannot open ({e.strerror or e})")) from None
        with fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
            except StopIteration:
                raise InputFormatError(InputProblem(self.path, f"empty file; expected {self.what}")) from None
            except (csv.Error, UnicodeDecodeError) as e:
                raise InputFormatError(InputProblem(self.path, f"unreadable header ({e}); expected {self.what}", line=1)) from None
            keys = [norm_header(h) for h in header]
            missing = [disp for key, disp in self.required.items() if key not in keys]
            if missing:
                raise InputFormatError(InputProblem(
                    self.path, f"missing column(s) {missing}; found {header}; expected {self.what}", line=1))
            width = len(keys)
            line = 1
            pending: Optional[tuple[int, list[str]]] = None
            try:
                for row in reader:
                    line = reader.line_num
                    if pending is not None:  # a short row followed by more rows: damage mid-file
                        self.problems.append(InputProblem(
                            self.path, f"row has {len(pending[1])} of {width} columns; skipped", line=pending[0]))
                        pending = None
                    if not row:
                        continue
                    if len(row) < width:
                        pending = (line, row)
                        continue
                    yield line, dict(zip(keys, row))
            except (csv.Error, UnicodeDecodeError) as e:
                self.problems.append(InputProblem(self.path, f"unreadable row ({e}); rows before it kept",
                                                  line=line + 1, partial=True))
                return
            if pending is not None:
                self.problems.append(InputProblem(
                    self.path, f"last row has {len(pending[1])} of {width} columns: the file was cut off",
                    line=pending[0], partial=True))

    def number(self, row: dict, key: str, line: int, required: bool = False) -> Optional[float]:
        try:
            value = _number(row.get(key))
        except ValueError:
            raise InputFormatError(InputProblem(
                self.path, f"column {self.required.get(key, key)!r} holds {row.get(key)!r}; expected a number "
                           f"(microseconds)", line=line)) from None
        if value is None and required:
            raise InputFormatError(InputProblem(
                self.path, f"column {self.required.get(key, key)!r} is empty; expected a number", line=line))
        return value


# ---------------------------------------------------------------------------------------------- step_trace_time
@dataclass
class StepTrace:
    """Sums over the rows of one step_trace_time.csv (µs)."""

    steps: list[Optional[str]] = field(default_factory=list)
    computing: float = 0.0
    comm_not_overlapped: float = 0.0
    overlapped: float = 0.0
    communication: float = 0.0
    free: float = 0.0
    device_ids: set = field(default_factory=set)

    @property
    def total(self) -> float:
        # Free is defined as the step time minus computing and (not overlapped) communication.
        return self.computing + self.comm_not_overlapped + self.free


_STEP_REQUIRED = {
    "computing": "Computing",
    "communication(notoverlapped)": "Communication(Not Overlapped)",
    "free": "Free",
}
_STEP_WHAT = ("torch_npu's step_trace_time.csv (columns Step, Computing, Communication(Not Overlapped), "
              "Overlapped, Communication, Free, ... in microseconds)")


def read_step_trace_time(path: str | Path) -> tuple[StepTrace, list[InputProblem]]:
    table = _Table(path, _STEP_REQUIRED, _STEP_WHAT)
    out = StepTrace()
    for line, row in table.rows():
        out.steps.append((row.get("step") or "").strip() or None)
        if row.get("device_id"):
            out.device_ids.add(row["device_id"].strip())
        out.computing += table.number(row, "computing", line) or 0.0
        out.comm_not_overlapped += table.number(row, "communication(notoverlapped)", line) or 0.0
        out.overlapped += table.number(row, "overlapped", line) or 0.0
        out.communication += table.number(row, "communication", line) or 0.0
        out.free += table.number(row, "free", line) or 0.0
    return out, table.problems


# ---------------------------------------------------------------------------------------------- kernel_details
_KERNEL_REQUIRED = {"name": "Name", "starttime(us)": "Start Time(us)", "duration(us)": "Duration(us)"}
_KERNEL_WHAT = ("torch_npu's kernel_details.csv (columns Name, Type, Accelerator Core, Start Time(us), "
                "Duration(us), ...)")


class KernelDetails:
    """Iterate (name, type, start_us, duration_us) of every NPU kernel in a kernel_details.csv."""

    def __init__(self, path: str | Path):
        self.table = _Table(path, _KERNEL_REQUIRED, _KERNEL_WHAT)

    @property
    def problems(self) -> list[InputProblem]:
        return self.table.problems

    def __iter__(self) -> Iterator[tuple[str, str, float, float]]:
        t = self.table
        for line, row in t.rows():
            start = t.number(row, "starttime(us)", line, required=True)
            dur = t.number(row, "duration(us)", line) or 0.0
            yield row["name"].strip(), (row.get("type") or "").strip(), start, dur


# ---------------------------------------------------------------------------------------------- operator_details
_OP_REQUIRED = {"name": "Name"}
_OP_WHAT = ("torch_npu's operator_details.csv (columns Name, Host Self Duration(us), Host Total Duration(us), "
            "Device Self Duration(us), ...)")


def read_operator_details(path: str | Path) -> tuple[dict[str, list[float]], list[InputProblem]]:
    """name -> [count, host self µs, device self µs] over all rows."""
    table = _Table(path, _OP_REQUIRED, _OP_WHAT)
    out: dict[str, list[float]] = {}
    for line, row in table.rows():
        name = row["name"].strip()
        host = table.number(row, "hostselfduration(us)", line) or 0.0
        dev = table.number(row, "deviceselfduration(us)", line) or 0.0
        acc = out.setdefault(name, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += host
        acc[2] += dev
    return out, table.problems
