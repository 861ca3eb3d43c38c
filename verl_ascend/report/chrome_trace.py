"""Streaming reader for Chrome trace JSON files (torch.profiler, vLLM, torch_npu ``trace_view.json``).

Why this exists: a full-length rollout trace can reach hundreds of GB, and ``json.load`` holds the
whole text *and* every event object at once (about 6.4 GB of memory and 46 s for a 1 GB trace). This
reader keeps a window of a few MB and yields the events of the ``traceEvents`` array one at a time, so
memory stays flat whatever the file size.

How: the bulk of the array is parsed in batches. The end of the window is cut just after the last
``}`` that is followed by ``,`` and ``{`` and the batch between two cuts is parsed by one C-level call
(``orjson`` when present, else ``json``). A cut that falls inside a string or a nested value leaves
unbalanced brackets, so that batch fails to parse and is re-read element by element with
``json.JSONDecoder.raw_decode``; that slow path also pin-points the byte offset of real errors.

Accepted layouts (Chrome "Trace Event Format"): a JSON object with a ``traceEvents`` array (other
top-level keys such as ``baseTimeNanoseconds`` are kept in :attr:`ChromeTraceReader.metadata`), or a
bare JSON array of events whose closing ``]`` may be missing, as the format allows. Files may be
gzip-compressed (torch's ``*.json.gz``), detected by content, not by name.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

try:  # orjson is ~3x faster than json; it is installed with upstream verl (via tensordict).
    import orjson as _orjson

    _loads_batch = _orjson.loads
except ImportError:  # pragma: no cover - exercised only where orjson is absent
    _orjson = None
    _loads_batch = json.loads

CHUNK_SIZE = 2 << 20
# A single element larger than this (no cut point found) is parsed with the exact, slow path.
_MAX_PENDING = 64 << 20
_WS = re.compile(rb"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_ACCEPTED = (
    "a Chrome trace: a JSON object with a 'traceEvents' array of event objects, or a JSON array of "
    "event objects (optionally gzip-compressed)"
)


class TraceFormatError(ValueError):
    """The file is not a readable Chrome trace. Carries the file, the byte offset and how many events
    were read before the problem, so callers can keep partial results."""

    def __init__(self, path: str, offset: Optional[int], message: str, events_read: int = 0):
        self.path = str(path)
        self.offset = offset
        self.reason = message
        self.events_read = events_read
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {message}")


class TraceTruncatedError(TraceFormatError):
    """The file ends in the middle of the trace: everything before the cut was read."""


def _utf8_complete_len(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 sequence."""
    n = len(data)
    i = n - 1
    # Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
    while i >= 0 and n - i <= 4 and (data[i] & 0xC0) == 0x80:
        i -= 1
    if i < 0:
        return n
    lead = data[i]
    if lead < 0x80:
        return n
    need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
    return n if n - i >= need else i


class _Source:
    """Byte stream of a plain or gzip-compressed file; gzip is recognised by its magic bytes."""

    def __init__(self, path: str):
        self.path = path
        raw = open(path, "rb")
        magic = raw.read(2)
        raw.seek(0)
        self.gzipped = magic == b"\x1f\x8b"
        self._fh = gzip.GzipFile(fileobj=raw, mode="rb") if self.gzipped else raw
        self._raw = raw

    def read(self, n: int, offset: int, events_read: int) -> bytes:
        try:
            return self._fh.read(n)
        except EOFError as e:  # gzip stream cut short
            raise TraceTruncatedError(
                self.path, offset, f"compressed stream ends early ({e}); the trace was cut off", events_read
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise TraceFormatError(self.path, offset, f"corrupt gzip data ({e}); expected {_ACCEPTED}", events_read) from None

    def close(self) -> None:
        self._fh.close()
        self._raw.close()


class ChromeTraceReader:
    """Iterate the events of one Chrome trace file without loading it whole.

    >>> reader = ChromeTraceReader("trace.json.gz")        # doctest: +SKIP
    >>> for event in reader.events(): ...                  # doctest: +SKIP
    >>> reader.metadata.get("baseTimeNanoseconds")         # doctest: +SKIP

    ``metadata`` holds the top-level keys other than ``traceEvents`` seen so far (torch writes
    some after the array, so read it after iterating). ``events_read`` counts yielded events.
    Errors raise :class:`TraceFormatError` (or :class:`TraceTruncatedError`) with the byte offset
    in the (decompressed) stream; every event yielded before the error is valid.
    """

    def __init__(self, path: str | Path, chunk_size: int = CHUNK_SIZE):
        self.path = str(path)
        self.chunk_size = chunk_size
        self.metadata: dict[str, Any] = {}
        self.events_read = 0
        self.layout: Optional[str] = None  # "object" or "array"
        self._buf = b""
        self._pos = 0
        self._base = 0  # absolute offset of _buf[0] in the decompressed stream
        self._eof = False
        self._src: Optional[_Source] = None

    # ------------------------------------------------------------------ buffer plumbing
    def _offset(self, pos: Optional[int] = None) -> int:
        return self._base + (self._pos if pos is None else pos)

    def _fail(self, message: str, pos: Optional[int] = None, truncated: bool = False) -> None:
        cls = TraceTruncatedError if truncated else TraceFormatError
        raise cls(self.path, self._offset(pos), message, self.events_read)

    def _fill(self, want: int) -> bool:
        """Make at least ``want`` unread bytes available (less at EOF). Returns False at EOF."""
        if len(self._buf) - self._pos >= want:
            return True
        if self._eof:
            return False
        parts = [self._buf[self._pos :]]
        have = len(parts[0])
        self._base += self._pos
        self._pos = 0
        while have < want and not self._eof:
            chunk = self._src.read(max(self.chunk_size, want - have), self._base + have, self.events_read)
            if not chunk:
                self._eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self._buf = b"".join(parts)
        return have >= want

    def _skip_ws(self) -> Optional[int]:
        """Skip whitespace; return the next byte (without consuming it) or None at EOF."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill(1):
                return None

    def _expect(self, byte: bytes, context: str) -> None:
        c = self._skip_ws()
        if c is None:
            self._fail(f"file ends where {byte.decode()!r} was expected ({context}); the trace was cut off", truncated=True)
        if c != byte[0]:
            self._fail(f"expected {byte.decode()!r} ({context}), found {chr(c)!r}; expected {_ACCEPTED}")
        self._pos += 1

    # ------------------------------------------------------------------ exact (slow) path
    def _parse_one(self) -> Any:
        """Parse exactly one JSON value at the current position, reading more as needed.

        Decodes a small window first (most values are well under 4 KB) and doubles it while the value
        runs past the window, so the slow path stays linear in the size of what it parses.
        """
        self._skip_ws()
        size = 1 << 12
        last_error_at = None
        while True:
            self._fill(size)
            window = self._buf[self._pos : self._pos + size]
            is_last = self._eof and self._pos + size >= len(self._buf)
            usable = len(window) if is_last else _utf8_complete_len(window)
            try:
                text = window[:usable].decode("utf-8")
            except UnicodeDecodeError as e:
                self._fail(f"invalid UTF-8 ({e.reason}); expected {_ACCEPTED}", self._pos + e.start)
            try:
                value, end = _DECODER.raw_decode(text)
            except json.JSONDecodeError as e:
                err_pos = self._pos + len(text[: e.pos].encode("utf-8"))
                at_end = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
                if is_last:
                    if at_end:
                        self._fail(f"file ends inside a JSON value ({e.msg}); the trace was cut off", err_pos, True)
                    self._fail(f"invalid JSON: {e.msg}; expected {_ACCEPTED}", err_pos)
                err_abs = self._base + err_pos
                if not at_end and err_abs == last_error_at:
                    self._fail(f"invalid JSON: {e.msg}; expected {_ACCEPTED}", err_pos)
                last_error_at = err_abs
                size *= 2
                continue
            self._pos += len(text[:end].encode("utf-8"))
            return value

    # ------------------------------------------------------------------ fast path
    def _find_cut(self) -> int:
        """Index just after the last ``}`` in the buffer that is followed by ``,`` and ``{`` (-1: none)."""
        buf, lo = self._buf, self._pos
        i = buf.rfind(b"{", lo + 1)
        while i > lo:
            j = i - 1
            while j > lo and buf[j] in b" \t\r\n":
                j -= 1
            if buf[j] == 0x2C:  # ','
                k = j - 1
                while k > lo and buf[k] in b" \t\r\n":
                    k -= 1
                if buf[k] == 0x7D:  # '}'
                    return k + 1
            i = buf.rfind(b"{", lo + 1, i)
        return -1

    def _array(self, bare: bool) -> Iterator[list]:
        """Yield the elements of the array whose ``[`` was just consumed, in lists (one per batch)."""
        need_comma = False
        while True:
            c = self._skip_ws()
            if c is None:
                if bare:
                    return  # the Trace Event Format lets a bare array omit its closing ']'
                self._fail("file ends inside the 'traceEvents' array; the trace was cut off", truncated=True)
            if c == 0x5D:  # ']'
                self._pos += 1
                return
            if need_comma:
                if c != 0x2C:
                    self._fail(f"expected ',' or ']' between trace events, found {chr(c)!r}")
                self._pos += 1
                need_comma = False
                continue
            cut = self._find_cut()
            if cut < 0:
                pending = len(self._buf) - self._pos
                if not self._eof and pending < _MAX_PENDING:
                    self._fill(pending + self.chunk_size)
                    if self._find_cut() >= 0 or not self._eof:
                        continue
                # Last element(s), or one huge element: parse exactly.
                value = self._parse_one()
                self.events_read += 1
                yield [value]
                need_comma = True
                continue
            segment = self._buf[self._pos : cut]
            try:
                items = _loads_batch(b"[" + segment + b"]")
            except ValueError:
                items = None
            if items is None:
                # A cut inside a string or nested value, or real damage: go element by element up to the
                # cut; this also finds the exact offset of real errors.
                end_abs = self._base + cut
                while self._offset() < end_abs:
                    value = self._parse_one()
                    self.events_read += 1
                    yield [value]
                    c = self._skip_ws()
                    if c == 0x2C:
                        self._pos += 1
                    elif c == 0x5D or c is None:
                        break
                    else:
                        self._fail(f"expected ',' or ']' between trace events, found {chr(c)!r}")
                need_comma = False
                continue
            self._pos = cut
            self.events_read += len(items)
            yield items
            need_comma = True

    # ------------------------------------------------------------------ top level
    def events(self) -> Iterator[dict]:
        """Yield every element of the trace's event array, in file order."""
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list]:
        """Yield the events in lists of consecutive events (a few thousand at a time): the fast way to
        consume a large trace, since it avoids a generator hop per event."""
        try:
            self._src = _Source(self.path)
        except OSError as e:
            raise TraceFormatError(self.path, None, f"cannot open: {e.strerror or e}") from None
        try:
            yield from self._top()
        finally:
            self._src.close()

    def _top(self) -> Iterator[list]:
        c = self._skip_ws()
        if c is None:
            self._fail(f"empty file; expected {_ACCEPTED}")
        if c == 0x5B:  # '['
            self.layout = "array"
            self._pos += 1
            yield from self._array(bare=True)
            return
        if c != 0x7B:  # '{'
            self._fail(f"starts with {chr(c)!r}; expected {_ACCEPTED}")
        self.layout = "object"
        self._pos += 1
        seen_events = False
        first = True
        while True:
            c = self._skip_ws()
            if c is None:
                self._fail("file ends inside the top-level object; the trace was cut off", truncated=True)
            if c == 0x7D:  # '}'
                self._pos += 1
                break
            if not first:
                if c != 0x2C:
                    self._fail(f"expected ',' or '}}' between top-level keys, found {chr(c)!r}")
                self._pos += 1
                self._skip_ws()
            first = False
            key_at = self._pos
            key = self._parse_one()
            if not isinstance(key, str):
                self._fail(f"top-level key is not a string; expected {_ACCEPTED}", key_at)
            self._expect(b":", f"after top-level key {key!r}")
            if key == "traceEvents":
                c = self._skip_ws()
                if c != 0x5B:
                    self._fail(f"'traceEvents' is not an array; expected {_ACCEPTED}")
                self._pos += 1
                seen_events = True
                yield from self._array(bare=False)
            else:
                self.metadata[key] = self._parse_one()
        if self._skip_ws() is not None:
            self._fail("unexpected data after the end of the trace object")
        if not seen_events:
            self._fail(f"no 'traceEvents' key in the top-level object; expected {_ACCEPTED}")


def iter_events(path: str | Path, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Convenience wrapper: the events of ``path`` (see :class:`ChromeTraceReader`)."""
    return ChromeTraceReader(path, chunk_size).events()
