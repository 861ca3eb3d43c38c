"""``verl-ascend seams [--json] [--strict] [--installed] [--scan [CHECKOUT]]``: one line per index row with its status.

Status: ``needed``; ``removable`` (a ``removable_if`` condition is met, with why);
``target-changed`` (a fingerprint no longer matches the installed upstream: re-verify the row).
Exit status, the one table (``verl_ascend.checks.exits``): 0; with ``--strict``, 2 (``REFUSED``) when
any row is removable or changed -- the verdict on this install is no, as for the stack gate (before the
one table it was 1, which now always means the command itself failed). ``--installed`` lists the rows
the ``plugin`` stage installed in this process (after ``import verl``); ``--scan`` prints the raw
contacts :mod:`verl_ascend.seams.scan` finds in a checkout's source, a maintainer's view of what the
index must cover.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verl_ascend.checks.exits import OK, REFUSED
from verl_ascend.cli import parser
from verl_ascend.seams.index import assembled, installed, status


def rows(seams=None) -> list[dict]:
    out = []
    for seam in assembled() if seams is None else seams:
        state, why = status(seam)
        out.append(
            {
                "id": seam.id,
                "kind": seam.kind,
                "stage": seam.stage,
                "status": state,
                "why": why,
                "members": len(seam.fingerprints),
                "install": seam.install,
                "code": seam.code,  # its docstring says why the row exists and what upstream change retires it
            }
        )
    return out


def main(argv=None, seams=None) -> int:
    args = _parser().parse_args(argv)
    if args.scan is not None:
        from verl_ascend.seams.scan import product_files, scan

        for contact in scan(product_files(args.scan)):
            print(contact)
        return OK
    if args.installed:
        import verl  # noqa: F401  (the verl.plugins entry points run install("plugin"))

        for path, ids in installed().items():
            print(json.dumps({"install": path, "rows": ids}) if args.json else f"{path}: {', '.join(ids)}")
        return OK
    table = rows(seams)
    for row in table:
        if args.json:
            print(json.dumps(row))
        else:
            why = f"  ({row['why']})" if row["why"] else ""
            print(f"{row['id']:32} {row['kind']:19} {row['stage']:8} {row['status']}{why}")
    flagged = [r for r in table if r["status"] != "needed"]
    if not args.json:
        print(f"{len(table)} rows, {sum(r['members'] for r in table)} members fingerprinted, {len(flagged)} flagged")
    return REFUSED if args.strict and flagged else OK


def _parser() -> argparse.ArgumentParser:
    p = parser("seams", "Every contact with upstream code (the seam index), one line per row with its status:\n"
               "needed, removable (with why) or target-changed (re-verify the row).",
               ["verl-ascend seams --json | grep -v '\"needed\"'   # only the rows to act on",
                "verl-ascend seams --installed   # what the plugin stage installed in this process",
                "verl-ascend seams --scan .   # the raw contacts in this checkout's source"])
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.add_argument("--strict", action="store_true", help="exit 2 (refused) when any row is removable or changed")
    p.add_argument("--installed", action="store_true",
                   help="import verl (loading its plugins) and list what this process installed")
    p.add_argument("--scan", type=Path, nargs="?", const=Path("."), default=None, metavar="CHECKOUT",
                   help="print every contact the scan finds in CHECKOUT's source (default: the current folder)")
    return p
