"""Read the files a user downloaded (parquet, JSON lines, JSON) into plain Python rows.

Why a reader of our own: the two datasets circulate in several shapes (the hub's parquet,
``datasets`` JSON-lines exports, hand-made JSON), and nested parquet columns come back from
pandas as numpy arrays that break ``isinstance(x, list)`` checks. Reading through pyarrow's
``to_pylist`` gives plain dicts and lists whatever the source, so the row checks downstream are
the same for every format. Nothing here touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_SUFFIXES = (".parquet", ".jsonl", ".json")


class InputFileError(ValueError):
    """A whole input file cannot be read (missing, unknown format, malformed container)."""


@dataclass(frozen=True)
class SourceRow:
    """One record of an input file, with where it came from (for error messages)."""

    path: Path
    index: int  # 0-based position of the record inside its file
    record: Any  # normally a dict; anything else is reported as a bad row downstream


def iter_rows(path: str | Path) -> Iterator[SourceRow]:
    """Yield every record of ``path``.

    Raises InputFileError for problems with the file as a whole; a JSON-lines line that does not
    parse is yielded as a row whose record is an ``UnparsableLine`` so that it is reported with
    its index like any other bad row.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputFileError(f"input file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _iter_parquet(path)
    elif suffix == ".jsonl":
        yield from _iter_jsonl(path)
    elif suffix == ".json":
        yield from _iter_json(path)
    else:
        raise InputFileError(
            f"{path}: unsupported file type {suffix!r}; accepted: {', '.join(SUPPORTED_SUFFIXES)}"
        )


@dataclass(frozen=True)
class UnparsableLine:
    """Stands in for a JSON-lines line that is not valid JSON."""

    error: str


def _iter_parquet(path: Path) -> Iterator[SourceRow]:
    import pyarrow.parquet as pq

    try:
        parquet_file = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputFileError(f"{path}: not a readable parquet file ({exc})") from exc
    index = 0
    # Row groups keep memory bounded for the 1.8M-row DAPO-Math file.
    for group in range(parquet_file.num_row_groups):
        try:
            records = parquet_file.read_row_group(group).to_pylist()
        except Exception as exc:  # a corrupt data page, invalid UTF-8 in a string column, ...
            raise InputFileError(
                f"{path}: row group {group} (rows from {index}) cannot be read ({type(exc).__name__}: {exc})"
            ) from exc
        for record in records:
            yield SourceRow(path, index, record)
            index += 1


def _iter_jsonl(path: Path) -> Iterator[SourceRow]:
    index = 0
    with path.open("rb") as handle:
        for raw in handle:
            if not raw.strip():
                continue  # blank lines carry no record and get no index
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                record = UnparsableLine(f"not UTF-8 text (byte {exc.start} of the line: {raw[exc.start:exc.start + 4]!r})")
            except json.JSONDecodeError as exc:
                record = UnparsableLine(f"invalid JSON ({exc.msg} at column {exc.colno})")
            yield SourceRow(path, index, record)
            index += 1


def _iter_json(path: Path) -> Iterator[SourceRow]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text (byte {exc.start}); accepted: UTF-8 encoded JSON") from exc
    records = _records_from_json(data, path)
    for index, record in enumerate(records):
        yield SourceRow(path, index, record)


def _records_from_json(data: Any, path: Path) -> list[Any]:
    """Accept a list of records, or a column dict ``{column: [values...]}`` of equal lengths."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        lengths = {len(v) for v in data.values()}
        if len(lengths) != 1:
            raise InputFileError(f"{path}: JSON columns have different lengths {sorted(lengths)}")
        (length,) = lengths
        columns = list(data)
        return [{c: data[c][i] for c in columns} for i in range(length)]
    raise InputFileError(
        f"{path}: expected a JSON list of records or an object of equal-length column lists, "
        f"got {type(data).__name__}"
    )
