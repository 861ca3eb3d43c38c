"""``python -m verl_ascend.seams [--json] [--strict]``: one line per index row with its status.

Status: ``needed``; ``removable`` (a ``removable_if`` condition is met, with why);
``target-changed`` (a fingerprint no longer matches the installed upstream: re-verify the row).
Exits 0; with ``--strict``, 1 when any row is removable or changed. ``--installed`` lists the
rows the ``plugin`` stage installed in this process (after ``import verl``).
"""

from __future__ import annotations

import argparse
import json
import sys

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
    parser = argparse.ArgumentParser(prog="python -m verl_ascend.seams", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any row is removable or changed")
    parser.add_argument(
        "--installed", action="store_true", help="import verl (loading its plugins) and list what this process installed"
    )
    args = parser.parse_args(argv)
    if args.installed:
        import verl  # noqa: F401  (the verl.plugins entry points run install("plugin"))

        for path, ids in installed().items():
            print(json.dumps({"install": path, "rows": ids}) if args.json else f"{path}: {', '.join(ids)}")
        return 0
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
    return 1 if args.strict and flagged else 0


if __name__ == "__main__":
    sys.exit(main())
