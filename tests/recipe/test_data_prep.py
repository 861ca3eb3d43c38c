"""Data preparation: local DAPO-Math-17k / AIME 2024 files -> upstream verl RL parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipe.dapo_ascend.data import prepare as prep
from recipe.dapo_ascend.data.rows import AIME_2024, DAPO_MATH, DAPO_INSTRUCTION_PREFIX, wrap_problem
from verl_ascend.checks.exits import REFUSED

FIXTURES = Path(__file__).parent / "fixtures"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def dapo_parquet(tmp_path: Path) -> Path:
    """The sample rows as nested parquet, the way the hub's dapo-math-17k.parquet stores them."""
    path = tmp_path / "dapo-math-17k.parquet"
    pq.write_table(pa.Table.from_pylist(_jsonl(FIXTURES / "dapo_math_sample.jsonl")), path)
    return path


def _read(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_dapo_math_parquet_becomes_upstream_rl_rows(dapo_parquet, tmp_path):
    out = tmp_path / "out" / "train.parquet"
    report = prep.prepare(DAPO_MATH, [dapo_parquet], out)
    rows = _read(out)
    assert report.rows_read == 4 and report.rows_written == 4 and len(rows) == 4
    assert set(rows[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert [r["data_source"] for r in rows] == ["math_dapo"] * 4
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["42", "9", "42", "\\frac{3}{4}"]
    assert all(r["reward_model"]["style"] == "rule" for r in rows)
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2, 3]
    assert rows[1]["extra_info"]["source_id"] == "0f6e1c1a-0002"
    assert rows[1]["extra_info"]["split"] == "train"
    source = _jsonl(FIXTURES / "dapo_math_sample.jsonl")
    # A prompt already in chat form is kept byte for byte (no second instruction).
    assert rows[0]["prompt"] == [{"role": "user", "content": source[0]["prompt"][0]["content"]}]


def test_dedup_drops_repeated_problem(dapo_parquet, tmp_path):
    out = tmp_path / "train.parquet"
    report = prep.prepare(DAPO_MATH, [dapo_parquet], out, dedup=True)
    assert report.duplicates_removed == 1
    assert [r["reward_model"]["ground_truth"] for r in _read(out)] == ["42", "9", "\\frac{3}{4}"]


def test_written_rows_score_through_upstream_math_dapo(dapo_parquet, tmp_path):
    from verl.utils.reward_score import default_compute_score

    out = tmp_path / "train.parquet"
    prep.prepare(DAPO_MATH, [dapo_parquet], out)
    prep.prepare(AIME_2024, [FIXTURES / "aime2024_maxwell.json"], tmp_path / "aime.parquet")
    for row in _read(out)[:2] + _read(tmp_path / "aime.parquet"):
        truth = row["reward_model"]["ground_truth"]
        right = default_compute_score(row["data_source"], f"work...\nAnswer: {truth}", truth)
        wrong = default_compute_score(row["data_source"], "work...\nAnswer: 123456789", truth)
        assert right["score"] == 1.0 and wrong["score"] == -1.0


def test_aime_flat_layout_is_wrapped_and_answers_checked(tmp_path):
    out = tmp_path / "aime.parquet"
    prep.prepare(AIME_2024, [FIXTURES / "aime2024_maxwell.json"], out)
    rows = _read(out)
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["7", "23", "408"]
    assert [r["data_source"] for r in rows] == ["aime_2024"] * 3
    assert rows[0]["extra_info"]["source_id"] == "2024-X-1" and rows[0]["extra_info"]["split"] == "test"
    content = rows[0]["prompt"][0]["content"]
    assert content.startswith(DAPO_INSTRUCTION_PREFIX) and "$7^{5}$" in content and content.endswith('"Answer:".')


def test_aime_leading_zero_answer_is_normalised(tmp_path):
    out = tmp_path / "aime.parquet"
    prep.prepare(AIME_2024, [FIXTURES / "aime2024_h4.jsonl"], out)
    assert [r["reward_model"]["ground_truth"] for r in _read(out)] == ["9", "24"]


def test_repeat_writes_consecutive_copies_with_unique_index(tmp_path):
    out = tmp_path / "aime.parquet"
    report = prep.prepare(AIME_2024, [FIXTURES / "aime2024_h4.jsonl"], out, repeat=3)
    rows = _read(out)
    assert report.rows_written == 6
    assert [r["extra_info"]["index"] for r in rows] == list(range(6))
    assert [r["extra_info"]["source_index"] for r in rows] == [0, 0, 0, 1, 1, 1]


def test_bad_rows_refuse_the_file_and_name_each_index(tmp_path):
    out = tmp_path / "train.parquet"
    with pytest.raises(prep.PrepareError) as err:
        prep.prepare(DAPO_MATH, [FIXTURES / "dapo_math_bad_rows.jsonl"], out)
    message = str(err.value)
    assert "4 bad row(s)" in message and "nothing written" in message
    assert "row 1: column 'problem' is empty" in message
    assert "row 2: no answer" in message
    assert "row 3: 'prompt'[0].role is 'robot'" in message
    assert "row 5: invalid JSON" in message
    assert "row 0" not in message and "row 4" not in message
    assert not out.exists()


def test_skip_bad_keeps_good_rows_and_counts_the_rest(tmp_path):
    out = tmp_path / "train.parquet"
    report = prep.prepare(DAPO_MATH, [FIXTURES / "dapo_math_bad_rows.jsonl"], out, skip_bad=True)
    rows = _read(out)
    assert len(report.bad_rows) == 4 and report.rows_written == 2
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "6"]
    assert [r["extra_info"]["source_index"] for r in rows] == [0, 4]
    assert rows[1]["prompt"][0]["content"] == wrap_problem("What is 3 + 3?")


def test_cli_exit_code_and_no_partial_output_on_bad_input(tmp_path, capsys):
    out = tmp_path / "train.parquet"
    out.write_bytes(b"previous good file")
    code = prep.main(["dapo-math", "-i", str(FIXTURES / "dapo_math_bad_rows.jsonl"), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == REFUSED
    assert "row 2: no answer" in captured.err and "--skip-bad" in captured.err
    assert out.read_bytes() == b"previous good file"  # untouched: the write is temp-then-rename
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.parquet"]


def test_cli_success_prints_counts(tmp_path, capsys):
    out = tmp_path / "aime.parquet"
    code = prep.main(["aime2024", "-i", str(FIXTURES / "aime2024_maxwell.json"), "-o", str(out), "--repeat", "2"])
    assert code == 0
    assert "wrote 6 rows" in capsys.readouterr().out
    assert len(_read(out)) == 6


def test_aime_answer_outside_range_is_a_bad_row(tmp_path):
    src = tmp_path / "aime.jsonl"
    rows = [{"problem": "p", "answer": "1000"}, {"problem": "q", "answer": "x/2"}]
    src.write_text("\n".join(json.dumps(row) for row in rows))
    with pytest.raises(prep.PrepareError) as err:
        prep.prepare(AIME_2024, [src], tmp_path / "o.parquet")
    assert "row 0: 'answer' is 1000; AIME answers are integers from 0 to 999" in str(err.value)
    assert "row 1: 'answer' is 'x/2'" in str(err.value)


def test_float_answers_from_json_become_integer_text(tmp_path):
    src = tmp_path / "rows.json"
    src.write_text(json.dumps({"question": ["a?", "b?"], "answer": [204.0, 2.5]}))  # column-oriented JSON
    out = tmp_path / "o.parquet"
    prep.prepare(DAPO_MATH, [src], out)
    assert [r["reward_model"]["ground_truth"] for r in _read(out)] == ["204", "2.5"]


def test_instruction_is_not_wrapped_twice():
    once = wrap_problem("What is 1 + 1?")
    assert wrap_problem(once) == once


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("rows.csv", "a,b\n", "unsupported file type '.csv'; accepted: .parquet, .jsonl, .json"),
        ("rows.json", '{"a": 1}', "expected a JSON list of records"),
        ("rows.parquet", "not parquet", "not a readable parquet file"),
    ],
)
def test_unreadable_inputs_are_named(tmp_path, name, content, expected):
    src = tmp_path / name
    src.write_text(content)
    with pytest.raises(prep.PrepareError) as err:
        prep.prepare(DAPO_MATH, [src], tmp_path / "o.parquet")
    assert str(src) in str(err.value) and expected in str(err.value)


def test_missing_input_and_wrong_output_suffix(tmp_path):
    with pytest.raises(prep.PrepareError, match="input file not found"):
        prep.prepare(DAPO_MATH, [tmp_path / "absent.parquet"], tmp_path / "o.parquet")
    with pytest.raises(prep.PrepareError, match="must end in .parquet"):
        prep.prepare(DAPO_MATH, [FIXTURES / "dapo_math_sample.jsonl"], tmp_path / "o.jsonl")


def test_large_outputs_are_written_in_row_groups(dapo_parquet, tmp_path, monkeypatch):
    monkeypatch.setattr(prep, "ROWS_PER_GROUP", 3)
    out = tmp_path / "train.parquet"
    report = prep.prepare(DAPO_MATH, [dapo_parquet], out)
    assert report.rows_written == 4 and pq.ParquetFile(out).num_row_groups == 2
    assert [r["extra_info"]["index"] for r in _read(out)] == [0, 1, 2, 3]


def _corrupt_parquet(path: Path) -> None:
    """A real parquet file whose first data page is overwritten (header and footer intact)."""
    pq.write_table(pa.table({"prompt": ["x" * 200] * 50}), path, compression="NONE")
    data = bytearray(path.read_bytes())
    data[20:220] = b"\xfe" * 200
    path.write_bytes(bytes(data))


def _invalid_utf8_parquet(path: Path) -> None:
    """A binary column declared as UTF-8 string: the bytes are not UTF-8."""
    table = pa.table({"prompt": pa.array([b"ok", b"bad \xff\xfe"], type=pa.binary())})
    pq.write_table(table.cast(pa.schema([("prompt", pa.string())]), safe=False), path)


@pytest.mark.parametrize(
    ("name", "make", "expected"),
    [
        ("latin1.jsonl", lambda p: p.write_bytes(b'{"prompt": "caf\xe9"}\n'), "not UTF-8 text"),
        ("latin1.json", lambda p: p.write_bytes(b'[{"prompt": "caf\xe9"}]'), "not UTF-8 text"),
        ("corrupt.parquet", _corrupt_parquet, "cannot be read"),
        ("badutf8.parquet", _invalid_utf8_parquet, "cannot be read"),
    ],
)
def test_damaged_inputs_exit_non_zero_with_the_file_named(tmp_path, capsys, name, make, expected):
    src = tmp_path / name
    make(src)
    code = prep.main(["dapo-math", "-i", str(src), "-o", str(tmp_path / "o.parquet")])
    err = capsys.readouterr().err
    assert code == REFUSED, err
    assert str(src) in err and expected in err
    assert not (tmp_path / "o.parquet").exists()


def test_output_that_is_a_folder_or_under_a_file(tmp_path, capsys):
    folder = tmp_path / "o.parquet"
    folder.mkdir()
    assert prep.main(["dapo-math", "-i", str(FIXTURES / "dapo_math_sample.jsonl"), "-o", str(folder)]) == REFUSED
    assert "is a folder" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / "o.parquet"
    assert prep.main(["dapo-math", "-i", str(FIXTURES / "dapo_math_sample.jsonl"), "-o", str(target)]) == REFUSED
    err = capsys.readouterr().err
    assert str(target) in err and "cannot be written" in err
