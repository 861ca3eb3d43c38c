"""The streaming Chrome trace reader: same events as json.load on every layout and buffer size, and
precise errors (file, byte offset, events kept) on damaged files."""

from __future__ import annotations

import gzip
import json
import random
import re

import pytest

from verl_ascend.report.chrome_trace import ChromeTraceReader, TraceFormatError, TraceTruncatedError, iter_events


def _events(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    names = ["aten::mm", "RmsNorm", 'tricky "},{" name', "名前_カーネル", "x" * 300, "a}, {b", "\u00e9\u00e8\u00ea"]
    out = []
    for i in range(n):
        ev = {"ph": "X", "cat": rng.choice(["cpu_op", "kernel"]), "name": rng.choice(names), "pid": rng.randint(0, 3),
              "tid": rng.randint(0, 3), "ts": round(rng.uniform(0, 1e6), 3), "dur": round(rng.uniform(0, 100), 3)}
        if i % 3 == 0:
            ev["args"] = {"nested": [{"a": 1}, {"b": [1, 2, {"c": "},{"}]}], "s": "},\n{"}
        out.append(ev)
    return out


@pytest.mark.parametrize("chunk", [7, 64, 1000, 1 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_object_layout_matches_json_load(tmp_path, chunk, indent):
    events = _events(300)
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": events, "traceName": "t",
           "baseTimeNanoseconds": 1700000000000000000}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=indent, ensure_ascii=False), encoding="utf-8")
    reader = ChromeTraceReader(path, chunk_size=chunk)
    assert list(reader.events()) == events
    assert reader.events_read == 300
    assert reader.layout == "object"
    # Keys before and after the array are kept.
    assert reader.metadata == {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceName": "t",
                               "baseTimeNanoseconds": 1700000000000000000}


@pytest.mark.parametrize("closed", [True, False])
def test_bare_array_with_optional_closing_bracket(tmp_path, closed):
    events = _events(50, seed=1)
    text = json.dumps(events)
    if not closed:  # the Trace Event Format allows the final ']' to be missing
        text = text.rstrip("]").rstrip() + ",\n"
    path = tmp_path / "trace_view.json"
    path.write_text(text)
    assert list(iter_events(path, chunk_size=128)) == events


def test_gzip_is_detected_by_content(tmp_path):
    events = _events(40, seed=2)
    path = tmp_path / "trace.bin"  # no .gz suffix: content decides
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    assert list(iter_events(path, chunk_size=100)) == events


def test_empty_event_array(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [], "x": 1}')
    reader = ChromeTraceReader(path)
    assert list(reader.events()) == []
    assert reader.metadata == {"x": 1}


def test_truncated_trace_keeps_events_and_names_offset(tmp_path):
    events = _events(100, seed=3)
    text = json.dumps({"traceEvents": events}, indent=1)
    cut = text.index('"ph"', len(text) // 2)  # inside an event in the second half
    path = tmp_path / "cut.json"
    path.write_bytes(text[:cut].encode())
    reader = ChromeTraceReader(path, chunk_size=256)
    got = []
    with pytest.raises(TraceTruncatedError) as info:
        for ev in reader.events():
            got.append(ev)
    err = info.value
    assert got == events[: len(got)] and 0 < len(got) < 100
    assert err.path == str(path) and err.events_read == len(got)
    assert "cut off" in str(err) and str(path) in str(err)
    assert err.offset is not None and err.offset <= cut


def test_truncated_gzip_stream(tmp_path):
    events = _events(2000, seed=4)
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[: len(data) // 2])
    got = []
    with pytest.raises(TraceTruncatedError) as info:
        for ev in iter_events(path, chunk_size=4096):
            got.append(ev)
    assert got == events[: len(got)] and len(got) > 0
    assert "compressed stream ends early" in info.value.reason


def test_invalid_json_reports_exact_byte_offset(tmp_path):
    events = _events(30, seed=5)
    text = json.dumps({"traceEvents": events}, ensure_ascii=False)
    m = re.compile(r'"dur": [0-9.]+').search(text, len(text) // 2)
    broken = text[: m.start()] + '"dur": 12x4' + text[m.end():]
    path = tmp_path / "bad.json"
    path.write_text(broken, encoding="utf-8")
    got = []
    with pytest.raises(TraceFormatError) as info:
        for ev in iter_events(path, chunk_size=97):
            got.append(ev)
    err = info.value
    assert not isinstance(err, TraceTruncatedError)
    # The offset counts bytes of the file (names hold multi-byte characters) and points at the junk.
    assert err.offset == len(broken[: m.start() + len('"dur": 12')].encode("utf-8"))
    assert "invalid JSON" in err.reason
    assert got == events[: len(got)] and err.events_read == len(got)


@pytest.mark.parametrize(
    "content, needle",
    [
        ("", "empty file"),
        ("hello", "starts with 'h'"),
        ('{"foo": 1}', "no 'traceEvents' key"),
        ('{"traceEvents": 5}', "'traceEvents' is not an array"),
        ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ',' or ']'"),
        ('{"traceEvents": []} trailing', "unexpected data after"),
    ],
)
def test_not_a_trace(tmp_path, content, needle):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(TraceFormatError) as info:
        list(iter_events(path))
    assert needle in str(info.value)
    assert str(path) in str(info.value)
    assert "Chrome trace" in str(info.value) or "trace" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError) as info:
        list(iter_events(tmp_path / "nope.json"))
    assert "cannot open" in str(info.value)


def test_multibyte_characters_across_chunk_boundaries(tmp_path):
    events = [{"ph": "X", "name": "内核" * 50 + str(i), "ts": i, "dur": 1} for i in range(40)]
    path = tmp_path / "u.json"
    path.write_text(json.dumps({"traceEvents": events}, ensure_ascii=False), encoding="utf-8")
    for chunk in (5, 11, 33):
        assert list(iter_events(path, chunk_size=chunk)) == events


def test_non_object_elements_are_yielded_as_is(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [1, "a", {"ph": "X"}, [2]]}')
    assert list(iter_events(path, chunk_size=3)) == [1, "a", {"ph": "X"}, [2]]
