"""Reader of upstream's metrics log: the JSON lines ``{"step": n, "data": {...}}`` that
``verl.utils.tracking.FileLogger`` writes when ``trainer.logger`` includes ``file``.

Why: the trainer already times every stage (``timing_s/gen``, ``timing_s/update_actor``, ...,
``timing_s/step``) for every step, profiled or not; that is the cheapest and most complete source of
the train:rollout ratio. Traces are needed only for what happens *inside* a phase.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from verl_ascend.report.problems import InputFormatError, InputProblem

TIMING_PREFIX = "timing_s/"
# Per-sample generation time spread from upstream's agent loop (experimental/agent_loop/agent_loop.py
# _performance_metrics); the legacy trainer logs them as timing_s/agent_loop/..., the V1 trainer not at all.
GEN_SPREAD_KEYS = ("agent_loop/generate_sequences/max", "agent_loop/generate_sequences/mean")
_EXPECTED = 'JSON lines of the form {"step": <int>, "data": {<metric>: <number>, ...}} (upstream FileLogger)'


@dataclass
class StepRecord:
    step: int
    timing: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    extra: dict[str, float] = field(default_factory=dict)  # other numeric metrics kept for the report


@dataclass
class MetricsLog:
    path: str
    steps: list[StepRecord]
    problems: list[InputProblem]


def looks_like_metrics_log(path: str | Path) -> bool:
    """True when the first non-empty line parses as a metrics record (cheap sniff for discovery)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    return isinstance(rec, dict) and "step" in rec and isinstance(rec.get("data"), dict)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return False


# The start of a record as upstream's FileLogger writes it: the step comes first, then its data.
_STEP_AT_START = re.compile(r'^\s*\{\s*"step"\s*:\s*(-?\d+)\s*[,}]')
TORN = "last line is incomplete: the log was cut off"


@dataclass(frozen=True)
class TornTail:
    """The last line of a log whose write was cut off (a crashed run): where, and its step if it got that far."""

    line: int
    step: Optional[int]


def torn_tail(path: str | Path) -> Optional[TornTail]:
    """The last line when it has no line end and is not JSON (a write cut off), else None."""
    last, number = "", 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, last in enumerate(fh, 1):
            pass
    if not last or last.endswith("\n"):
        return None
    try:
        json.loads(last)
        return None
    except ValueError:
        match = _STEP_AT_START.match(last)
        return TornTail(number, int(match.group(1)) if match else None)


def _records(path: str, problems: list[InputProblem]) -> Iterator[tuple[int, dict]]:
    """(step, data) of each valid record in file order; each bad line becomes a problem (file and line)."""
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise InputFormatError(InputProblem(path, f"cannot open ({e.strerror or e})")) from None
    with fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, 1):
                text = line.strip()
                if not text:
                    continue
                try:
                    rec = json.loads(text)
                except ValueError as e:
                    last = not line.endswith("\n")
                    msg = TORN if last else f"not JSON ({e.msg} at column {e.colno})"
                    problems.append(InputProblem(path, f"{msg}; expected {_EXPECTED}", line=lineno, partial=True))
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("data"), dict) or "step" not in rec:
                    problems.append(InputProblem(path, f"not a metrics record; expected {_EXPECTED}", line=lineno,
                                                 partial=True))
                    continue
                try:
                    step = int(rec["step"])
                except (TypeError, ValueError):
                    problems.append(InputProblem(path, f"'step' is {rec['step']!r}; expected an integer", line=lineno,
                                                 partial=True))
                    continue
                yield step, rec["data"]
        except UnicodeDecodeError as e:
            problems.append(InputProblem(path, f"not UTF-8 text ({e.reason}); lines before it kept", line=lineno + 1,
                                         partial=True))


def _numbers(data: dict) -> Iterator[tuple[str, float]]:
    for key, value in data.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, float(value)


def _no_valid_record(path: str, problems: list[InputProblem]) -> InputFormatError:
    return InputFormatError(InputProblem(path, f"no valid metrics record; expected {_EXPECTED}",
                                         line=problems[0].line if problems else None))


def read_metrics_log(path: str | Path, keep: tuple[str, ...] = GEN_SPREAD_KEYS) -> MetricsLog:
    """Read every step; bad lines become problems (file and line), good lines are kept.

    A step logged twice (a resumed run appends to the same file) keeps its last record.
    """
    path = str(path)
    problems: list[InputProblem] = []
    by_step: dict[int, StepRecord] = {}
    good = 0
    for step, data in _records(path, problems):
        record = StepRecord(step)
        for key, value in _numbers(data):
            if key.startswith(TIMING_PREFIX):
                name = key[len(TIMING_PREFIX):]
                if "/" not in name:  # stage timers are flat names; nested ones are statistics
                    record.timing[name] = value
                elif name in keep:
                    record.extra[name] = value
            elif key in keep:
                record.extra[key] = value
        by_step[step] = record
        good += 1
    if good == 0 and problems:
        raise _no_valid_record(path, problems)
    return MetricsLog(path, [by_step[s] for s in sorted(by_step)], problems)


def read_step_values(path: str | Path) -> tuple[dict[int, dict[str, float]], list[InputProblem]]:
    """Every numeric metric of every step, under upstream's own names (``timing_s/step``, ...).

    Records of one step are merged, a later value of a key winning: the trainer may log a step's
    validation apart from its training metrics, and a resumed run appends its steps again.
    Non-finite values (upstream logs NaN for an empty comparison) are kept as they are.
    """
    path = str(path)
    problems: list[InputProblem] = []
    by_step: dict[int, dict[str, float]] = {}
    for step, data in _records(path, problems):
        by_step.setdefault(step, {}).update(_numbers(data))
    if not by_step:
        raise _no_valid_record(path, problems)
    return dict(sorted(by_step.items())), problems

