"""Prepare DAPO-Math-17k (training) and AIME 2024 (validation) as upstream verl RL parquet files.

Usage (files you downloaded yourself; nothing is fetched)::

    verl-ascend data dapo-math --input dapo-math-17k.parquet --output ~/data/dapo/dapo-math-17k.parquet
    verl-ascend data aime2024 --input aime_2024_problems.parquet --output ~/data/dapo/aime-2024.parquet

Why it exists: the example job reads these two files, and a row with a missing answer or a
malformed prompt does not stop training, it silently scores -1 forever. So every row is checked;
by default one bad row refuses the whole file (exit 2, ``REFUSED`` of the one table
``verl_ascend.checks.exits``; each bad row listed with its index, nothing written), and
``--skip-bad`` drops them and reports how many. Output is written to a temporary file next to the
target and renamed into place, so a failed run never leaves a half-written file.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recipe.dapo_ascend.data.readers import InputFileError, iter_rows
from recipe.dapo_ascend.data.rows import AIME_2024, DAPO_MATH, BadRow, CleanRow, DatasetSpec, clean_row, to_rl_row
from verl_ascend.checks.exits import OK, REFUSED
from verl_ascend.cli import parser as cli_parser

SPECS = {spec.name: spec for spec in (DAPO_MATH, AIME_2024)}
# How many bad rows to list before summarising; the full count is always printed.
MAX_LISTED_BAD_ROWS = 20
# Rows per parquet row group: bounds the writer's memory and keeps reads parallel.
ROWS_PER_GROUP = 100_000


class PrepareError(RuntimeError):
    """The inputs cannot be turned into an output file; the message says why and what to do."""


@dataclass
class Report:
    """What a run read, dropped and wrote (printed at the end, returned for tests)."""

    output: Path
    rows_read: int = 0
    rows_written: int = 0
    duplicates_removed: int = 0
    bad_rows: list[str] = field(default_factory=list)


def prepare(
    spec: DatasetSpec,
    inputs: Sequence[str | Path],
    output: str | Path,
    *,
    skip_bad: bool = False,
    dedup: bool = False,
    repeat: int = 1,
    limit: int | None = None,
) -> Report:
    """Read ``inputs``, check every row, write ``output`` atomically; raise PrepareError on bad input."""
    output = Path(output).expanduser()
    _check_arguments(inputs, output, repeat, limit)
    report = Report(output=output)
    clean: list[CleanRow] = []
    seen: set[tuple] = set()
    for path in inputs:
        try:
            for row in iter_rows(path):
                report.rows_read += 1
                try:
                    item = clean_row(row, spec)
                except BadRow as exc:
                    report.bad_rows.append(f"{row.path} row {row.index}: {exc}")
                    continue
                if dedup:
                    key = item.dedup_key()
                    if key in seen:
                        report.duplicates_removed += 1
                        continue
                    seen.add(key)
                clean.append(item)
        except InputFileError as exc:
            raise PrepareError(str(exc)) from exc
    if report.bad_rows and not skip_bad:
        raise PrepareError(_bad_rows_message(report.bad_rows, written=False))
    if limit is not None:
        clean = clean[:limit]
    if not clean:
        raise PrepareError(f"no valid rows in {', '.join(str(p) for p in inputs)}; nothing written")
    rows = (to_rl_row(item, spec, index) for index, item in enumerate(_repeated(clean, repeat)))
    try:
        report.rows_written = _write_parquet_atomically(rows, output)
    except OSError as exc:
        raise PrepareError(f"--output {output} cannot be written ({exc.strerror or exc}); accepted: a writable .parquet path") from exc
    return report


def _check_arguments(inputs: Sequence[str | Path], output: Path, repeat: int, limit: int | None) -> None:
    if not inputs:
        raise PrepareError("no --input given")
    if output.suffix != ".parquet":
        raise PrepareError(f"--output must end in .parquet (upstream's RL dataset reads parquet), got {output}")
    if output.is_dir():
        raise PrepareError(f"--output {output} is a folder; accepted: a .parquet file path")
    if any(Path(p).expanduser().resolve() == output.resolve() for p in inputs):
        raise PrepareError(f"--output {output} is also an input; write to a new file")
    if repeat < 1:
        raise PrepareError(f"--repeat must be >= 1, got {repeat}")
    if limit is not None and limit < 1:
        raise PrepareError(f"--limit must be >= 1, got {limit}")


def _repeated(rows: list[CleanRow], repeat: int) -> Iterator[CleanRow]:
    # Copies sit next to each other, so a validation batch holds all samples of one problem.
    return (row for row in rows for _ in range(repeat))


def _bad_rows_message(bad_rows: list[str], written: bool) -> str:
    listed = bad_rows[:MAX_LISTED_BAD_ROWS]
    verdict = "skipped (--skip-bad):" if written else "nothing written:"
    lines = [f"{len(bad_rows)} bad row(s) in the input; {verdict}"]
    lines += [f"  {entry}" for entry in listed]
    if len(bad_rows) > len(listed):
        lines.append(f"  ... and {len(bad_rows) - len(listed)} more")
    if not written:
        lines.append("Fix them in the source, or rerun with --skip-bad to drop them.")
    return "\n".join(lines)


def _write_parquet_atomically(rows: Iterable[dict], output: Path) -> int:
    """Write ``rows`` in row groups (bounded memory for the 1.8M-row file); return how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    written = 0
    writer = None
    try:
        for batch in _batches(rows, ROWS_PER_GROUP):
            table = pa.Table.from_pylist(batch, schema=writer.schema if writer else None)
            if writer is None:
                writer = pq.ParquetWriter(temporary, table.schema)
            writer.write_table(table)
            written += len(batch)
        if writer is not None:
            writer.close()
            writer = None
        os.replace(temporary, output)
    finally:
        if writer is not None:
            writer.close()
        if temporary.exists():
            temporary.unlink()
    return written


def _batches(rows: Iterable[dict], size: int) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def build_parser() -> argparse.ArgumentParser:
    parser = cli_parser(
        "data",
        "Convert local DAPO-Math-17k / AIME 2024 files into upstream verl's RL parquet format (nothing is fetched).",
        ["verl-ascend data dapo-math -i dapo-math-17k.parquet -o ~/data/dapo/dapo-math-17k.parquet --dedup",
         "verl-ascend data dapo-math --help   # the options of one dataset"],
    )
    sub = parser.add_subparsers(dest="dataset", required=True, metavar="{dapo-math,aime2024}")
    for spec in SPECS.values():
        help_text = {
            "dapo-math": "training set (BytedTsinghua-SIA/DAPO-Math-17k or a question/answer export)",
            "aime2024": "validation set (Maxwell-Jia/AIME_2024, HuggingFaceH4/aime_2024, BytedTsinghua-SIA/AIME-2024)",
        }[spec.name]
        p = sub.add_parser(spec.name, help=help_text)
        p.add_argument("--input", "-i", action="append", required=True, help="a .parquet/.jsonl/.json file; repeatable")
        p.add_argument("--output", "-o", required=True, help="the .parquet file to write")
        p.add_argument("--skip-bad", action="store_true", help="drop bad rows (counted and listed) instead of failing")
        p.add_argument("--limit", type=int, default=None, help="keep only the first N valid rows (smoke tests)")
        if spec.name == "dapo-math":
            p.add_argument(
                "--dedup",
                action="store_true",
                help="drop repeated (prompt, answer) pairs: the hub file holds each of its ~17k problems many times",
            )
        else:
            p.add_argument(
                "--repeat", type=int, default=1, help="write each problem N times (avg@N evaluation with val n=1)"
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = SPECS[args.dataset]
    try:
        report = prepare(
            spec,
            args.input,
            args.output,
            skip_bad=args.skip_bad,
            dedup=getattr(args, "dedup", False),
            repeat=getattr(args, "repeat", 1),
            limit=args.limit,
        )
    except PrepareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    if report.bad_rows:
        print(_bad_rows_message(report.bad_rows, written=True), file=sys.stderr)
    print(
        f"wrote {report.rows_written} rows to {report.output} "
        f"(read {report.rows_read}, skipped {len(report.bad_rows)} bad, "
        f"removed {report.duplicates_removed} duplicates; data_source={spec.data_source})"
    )
    return OK
