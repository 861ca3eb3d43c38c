"""One cell of the node x check table: what one node showed for one check, and what to do about it.

Why one small type shared by the neutral probes, the device hook's probes and the comparison: the
table, the JSON and the exit status read cells only, so a backend adds a probe (npu-smi, hccn_tool)
by returning cells, and the verdict rule (any ``FAIL`` is "not ready") lives in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
SEVERITY = {SKIP: 0, OK: 1, WARN: 2, FAIL: 3}  # a column shows its worst cell

# The table's columns, in order; a backend's cells use these names too.
CHECKS = ("node", "stack", "devices", "env", "socket", "ports", "files", "checkpoint", "memory", "links", "collective")


@dataclass(frozen=True)
class Cell:
    """``status`` of ``check`` on ``node``: ``detail`` says what was seen; a warning or failure also says
    what was ``expected`` and the ``fix``. ``node`` is the label of :func:`node_label` (filled in by the driver
    for a probe's cells)."""

    check: str
    status: str
    detail: str
    expected: str = ""
    fix: str = ""
    node: str = ""
    data: dict = field(default_factory=dict)  # numbers a reader of the JSON wants (bandwidth, bytes free)

    def __post_init__(self):
        if self.check not in CHECKS:
            raise ValueError(f"cluster check {self.check!r} is not a column; accepted: {', '.join(CHECKS)}")
        if self.status not in SEVERITY:
            raise ValueError(f"cell status {self.status!r}; accepted: {', '.join(SEVERITY)}")

    def at(self, node: str) -> Cell:
        return Cell(self.check, self.status, self.detail, self.expected, self.fix, node, self.data)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(raw: dict) -> Cell:
        return Cell(**raw)


def ok(check: str, detail: str, **data) -> Cell:
    return Cell(check, OK, detail, data=data)


def skip(check: str, detail: str) -> Cell:
    return Cell(check, SKIP, detail)


def fail(check: str, detail: str, expected: str, fix: str, **data) -> Cell:
    return Cell(check, FAIL, detail, expected, fix, data=data)


def warn(check: str, detail: str, expected: str, fix: str, **data) -> Cell:
    return Cell(check, WARN, detail, expected, fix, data=data)


def capacity(check: str, have: str, free: int, need: int | None, need_text: str, unknown: str, fix: str) -> Cell:
    """``free`` bytes (described by ``have``) against ``need`` (None: nothing to hold it against, ``unknown`` says why)."""
    if need is None:
        return ok(check, f"{have}{unknown}", free=free)
    if free < need:
        return fail(check, f"{have}, below {need_text}", need_text, fix, free=free, needed=need)
    return ok(check, f"{have}; {need_text}", free=free, needed=need)


def worst(cells) -> str | None:
    """The status a column shows for these cells (None: no cell)."""
    statuses = [c.status for c in cells]
    return max(statuses, key=SEVERITY.__getitem__) if statuses else None


def findings(cells) -> list[Cell]:
    """The cells that are findings: failures first, then warnings, each group in node then column order."""
    order = {c: i for i, c in enumerate(CHECKS)}
    picked = [c for c in cells if c.status in (FAIL, WARN)]
    return sorted(picked, key=lambda c: (-SEVERITY[c.status], c.node, order[c.check]))


def node_label(ip: str, head: bool) -> str:
    return f"{ip} (head)" if head else ip
