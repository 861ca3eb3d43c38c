"""What went wrong with one input file, kept next to the results instead of aborting the report.

Why: a run leaves many files; one truncated trace (a worker killed mid-write) must not hide what the
others say. Each problem names the file and, where it means something, the line or byte offset, and
says whether the numbers taken from that file are partial.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass
class InputProblem:
    path: str
    message: str
    line: Optional[int] = None
    offset: Optional[int] = None
    partial: bool = False  # True: data read before the problem was kept

    def __str__(self) -> str:
        where = f":{self.line}" if self.line is not None else (f" (byte {self.offset})" if self.offset is not None else "")
        kept = " [partial data kept]" if self.partial else ""
        return f"{self.path}{where}: {self.message}{kept}"

    def to_dict(self) -> dict:
        return asdict(self)


class InputFormatError(ValueError):
    """A file cannot be read at all; carries the problem description."""

    def __init__(self, problem: InputProblem):
        self.problem = problem
        super().__init__(str(problem))
