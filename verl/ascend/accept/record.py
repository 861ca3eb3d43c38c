"""The acceptance record: one :class:`Check` per step, written as ``accept.json`` and ``accept.txt``.

(Not :mod:`verl_ascend.report`, the offline profiling report, which a check of this run reads.)

Each check carries what was measured (``value``), its verdict and, on a CPU host, which parts are
device-only and were skipped there and what stood in for them, so a green CPU run never reads as a
proof of the device.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verl_ascend.checks.exits import OK, REFUSED
from verl_ascend.run.files import write_atomic

PASS, FAIL, SKIPPED = "pass", "FAIL", "skipped"
VERDICTS = (PASS, FAIL, SKIPPED)
JSON_NAME, TEXT_NAME = "accept.json", "accept.txt"


@dataclass
class Check:
    """One acceptance check: its measured value, verdict and what the verdict rests on."""

    id: str
    title: str
    verdict: str = PASS
    value: dict = field(default_factory=dict)  # what was measured (numbers, names, counts)
    detail: list[str] = field(default_factory=list)  # one line per finding, culprits named
    device_only: list[str] = field(default_factory=list)  # parts skipped here: they need the device
    stands_in: list[str] = field(default_factory=list)  # what ran instead of each skipped part
    seconds: float = 0.0

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"check {self.id}: verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    def fail(self, line: str) -> None:
        self.verdict = FAIL
        self.detail.append(line)


INTERRUPTED = 128 + signal.SIGINT  # 130: the shell's status of a command stopped by Ctrl-C: no verdict


def stopped_by_ctrl_c(returncode: int) -> bool:
    """A launched process that Ctrl-C stopped (it exited 130, or died of SIGINT): the user's stop, not a
    failing host; the caller raises KeyboardInterrupt so the command ends as interrupted."""
    return returncode in (INTERRUPTED, -signal.SIGINT)


def exit_code(checks: list[Check]) -> int:
    """The checks' one table (:mod:`verl_ascend.checks.exits`): ``OK`` (0) when no check failed (skipped
    checks do not fail a run), else ``REFUSED`` (2): the host is not accepted, the report says why."""
    return REFUSED if any(c.verdict == FAIL for c in checks) else OK


def _short(item):
    """Floats to 3 significant digits, for the text report (the JSON keeps them whole)."""
    if isinstance(item, float):
        return float(f"{item:.3g}")
    if isinstance(item, dict):
        return {k: _short(v) for k, v in item.items()}
    if isinstance(item, list):
        return [_short(v) for v in item]
    return item


def _value_lines(value: dict, indent: str = "      ") -> list[str]:
    lines = []
    for key, item in value.items():
        if isinstance(item, dict) and item and all(isinstance(v, dict) for v in item.values()):
            lines.append(f"{indent}{key}:")
            lines += _value_lines(item, indent + "  ")
        elif isinstance(item, list) and item and all(isinstance(v, str) for v in item):
            lines.append(f"{indent}{key}:")
            lines += [f"{indent}  {v}" for v in item]
        else:
            shown = json.dumps(_short(item)) if isinstance(item, (dict, list)) else _short(item)
            lines.append(f"{indent}{key}: {shown}")
    return lines


def render_text(checks: list[Check], meta: dict) -> str:
    out = [f"verl-ascend acceptance on {meta['host']} ({meta['mode']}), {meta['started']}"]
    for i, c in enumerate(checks, 1):
        out.append(f"{i}. [{c.verdict:7}] {c.title} ({c.seconds:.1f} s)")
        out += [f"      {line}" for line in c.detail]
        out += _value_lines(c.value)
        out += [f"      device-only, skipped here: {line}" for line in c.device_only]
        out += [f"      stands in here: {line}" for line in c.stands_in]
    failed = [c.id for c in checks if c.verdict == FAIL]
    out.append("acceptance: " + (f"FAILED ({', '.join(failed)})" if failed else "OK"))
    return "\n".join(out) + "\n"


def metadata(mode: str) -> dict:
    return {"host": platform.node(), "mode": mode, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_report(folder: Path, checks: list[Check], meta: dict) -> tuple[Path, Path, str]:
    """Write both files (each to a temporary name, then renamed); returns their paths and the text."""
    text = render_text(checks, meta)
    data = {"schema": 1, **meta, "verdict": FAIL if exit_code(checks) != OK else PASS,
            "checks": [asdict(c) for c in checks]}
    paths = []
    for name, content in ((JSON_NAME, json.dumps(data, indent=2, sort_keys=False) + "\n"), (TEXT_NAME, text)):
        path = folder / name
        write_atomic(str(path), content.encode())
        paths.append(path)
    return paths[0], paths[1], text


def writable_folder(raw: str) -> Path:
    """The report folder, created if needed; ValueError naming it when it cannot be written."""
    folder = Path(raw).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".accept-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"--out {raw}: the report folder cannot be written ({e.strerror or e}); "
                         "give a folder you can write to") from e
    return folder
