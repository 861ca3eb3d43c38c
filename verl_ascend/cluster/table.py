"""The node x check table (text and JSON) and the verdict.

How to read it: one row per node, one column per check, each cell the worst status of that check on that
node (``ok``, ``warn``, ``FAIL``, ``skip``: not probed here, the notes say what it would check). Below the
table, every finding: the node, the check, what was seen, what was expected and the fix. ``FAIL`` makes the
cluster not ready (exit 2); a warning is printed and does not block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from verl_ascend.cluster import cells

CLUSTER_ROW = "cluster"  # findings about the cluster as a whole (too few nodes alive)


@dataclass
class Report:
    title: str
    rows: list[str]  # node labels, the driver's first
    cells: list[cells.Cell]
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def findings(self) -> list[cells.Cell]:
        return cells.findings(self.cells)

    @property
    def ready(self) -> bool:
        return not any(c.status == cells.FAIL for c in self.cells)

    def columns(self) -> list[str]:
        present = {c.check for c in self.cells}
        return [c for c in cells.CHECKS if c in present]

    def status(self, row: str, check: str) -> str:
        return cells.worst([c for c in self.cells if c.node == row and c.check == check]) or "-"

    def verdict(self) -> str:
        fails = [c for c in self.cells if c.status == cells.FAIL]
        warns = [c for c in self.cells if c.status == cells.WARN]
        if not fails:
            return f"READY: {len(self.rows)} nodes, 0 failures, {len(warns)} warnings ({self.wall_s:.1f} s)"
        nodes = sorted({c.node for c in fails})
        return (f"NOT READY: {len(fails)} failures on {len(nodes)} of {len(self.rows)} nodes ({', '.join(nodes)}), "
                f"{len(warns)} warnings ({self.wall_s:.1f} s)")


def text(report: Report) -> str:
    columns = report.columns()
    rows = [*report.rows, *([CLUSTER_ROW] if any(c.node == CLUSTER_ROW for c in report.cells) else [])]
    width = max([len("node"), *(len(r) for r in rows)])
    lines = [report.title, "", "  ".join([f"{'node':<{width}}", *(f"{c:<{max(len(c), 4)}}" for c in columns)])]
    for row in rows:
        lines.append("  ".join([f"{row:<{width}}", *(f"{report.status(row, c):<{max(len(c), 4)}}" for c in columns)]))
    found = report.findings
    lines += ["", f"findings ({len(found)}):" if found else "findings: none"]
    for cell in found:
        lines.append(f"  {cell.status:<4} {cell.node}  {cell.check}: {cell.detail}")
        lines.append(f"       expected: {cell.expected}")
        lines.append(f"       fix: {cell.fix}")
    skipped = sorted({(c.check, c.detail) for c in report.cells if c.status == cells.SKIP})
    notes = [*report.notes, *(f"{check} skipped: {detail}" for check, detail in skipped)]
    if notes:
        lines += ["", "notes:", *(f"  {n}" for n in notes)]
    lines += ["", report.verdict()]
    return "\n".join(lines)


def to_json(report: Report) -> str:
    return json.dumps({
        "title": report.title,
        "ready": report.ready,
        "verdict": report.verdict(),
        "wall_s": report.wall_s,
        "nodes": report.rows,
        "checks": report.columns(),
        "table": {row: {c: report.status(row, c) for c in report.columns()} for row in report.rows},
        "findings": [c.to_json() for c in report.findings],
        "cells": [c.to_json() for c in report.cells],
        "notes": report.notes,
    }, indent=2)
