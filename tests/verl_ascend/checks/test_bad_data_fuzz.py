"""Bad data never reaches Ray: each corruption is refused before training with the file, row and
field named -- or, with ``data.skip_bad_rows=true``, dropped with a count in the log.

Most cases call the recipe's preflight in-process on the composed ``dapo_tiny_cpu`` config (one
Hydra composition per module); one case runs the entry point (in this process, ``entry``) to check
the exit status, the line on stderr and that nothing is written.
"""

from __future__ import annotations

import copy
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import open_dict

from tests.recipe.helpers import REPO, entry  # noqa: F401 (entry: a fixture)

ROWS = 40


@pytest.fixture(scope="module")
def base_config(tiny_dir):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "recipe" / "dapo_ascend" / "config"), version_base=None):
        return compose(config_name="dapo_tiny_cpu", overrides=[f"tiny_dir={tiny_dir}"])


@pytest.fixture(scope="module")
def good_table(tiny_dir) -> pa.Table:
    return pq.read_table(tiny_dir / "data" / "train.parquet").slice(0, ROWS)


def _config(base, train: Path, out_dir: Path, monkeypatch, **data):
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(out_dir))
    cfg = copy.deepcopy(base)
    with open_dict(cfg):
        cfg.data.train_files = str(train)
        for key, value in data.items():
            cfg.data[key] = value
    return cfg


def _refused(cfg, *needles):
    from verl_ascend.checks.preflight import PreflightError, check_data

    with pytest.raises(PreflightError) as info:
        check_data(cfg)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    return message


# ----------------------------------------------------------------------------- corruptions
def _replace_column(table: pa.Table, name: str, values: list, type_=None) -> pa.Table:
    index = table.column_names.index(name)
    column = pa.array(values, type=type_ if type_ is not None else table.schema.field(name).type)
    return table.set_column(index, name, column)


def _with_prompt(table: pa.Table, row: int, prompt) -> pa.Table:
    values = table.column("prompt").to_pylist()
    values[row] = prompt
    return _replace_column(table, "prompt", values)


def _non_utf8_prompt(table: pa.Table, row: int) -> pa.Table:
    """``prompt[0].content`` of ``row`` holds bytes that are not UTF-8, in a string column."""
    contents = [p[0]["content"].encode() for p in table.column("prompt").to_pylist()]
    contents[row] = b"1 2 \xff\xfe 3"
    content = pa.array(contents, type=pa.binary()).view(pa.string())
    role = pa.array(["user"] * len(contents), type=pa.string())
    structs = pa.StructArray.from_arrays([content, role], names=["content", "role"])
    offsets = pa.array(range(len(contents) + 1), type=pa.int32())
    return table.set_column(table.column_names.index("prompt"), "prompt", pa.ListArray.from_arrays(offsets, structs))


def _set_field(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    return _replace_column(table, column, values)


# Each mutation: (name, function(table, row) -> table, field named in the error, words in the error).
MUTATIONS = [
    ("empty content", lambda t, r: _with_prompt(t, r, [{"role": "user", "content": ""}]), "'prompt'", "empty"),
    ("blank content", lambda t, r: _with_prompt(t, r, [{"role": "user", "content": "  \n "}]), "'prompt'", "empty"),
    ("no messages", lambda t, r: _with_prompt(t, r, []), "'prompt'", "empty list"),
    ("null prompt", lambda t, r: _with_prompt(t, r, None), "'prompt'", "null"),
    ("null content", lambda t, r: _with_prompt(t, r, [{"role": "user", "content": None}]), "'prompt[0].content'", "NoneType"),
    ("null role", lambda t, r: _with_prompt(t, r, [{"role": None, "content": "1 2"}]), "'prompt[0].role'", "role"),
    ("over max length", lambda t, r: _with_prompt(t, r, [{"role": "user", "content": " ".join("7" * 12)}]), "'prompt'", "max_prompt_length=8"),
    ("non-UTF-8 text", _non_utf8_prompt, "'prompt'", "UTF-8"),
    ("null ground truth", lambda t, r: _set_field(t, "reward_model", r, {"style": "rule", "ground_truth": None}), "'reward_model'", "ground_truth"),
    ("empty ground truth", lambda t, r: _set_field(t, "reward_model", r, {"style": "rule", "ground_truth": " "}), "'reward_model.ground_truth'", "empty"),
    ("null data source", lambda t, r: _set_field(t, "data_source", r, None), "'data_source'", "non-empty string"),
]


@pytest.mark.parametrize("name, mutate, field, words", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_bad_row_is_named(base_config, good_table, tmp_path, monkeypatch, name, mutate, field, words):
    row = random.Random(name).randrange(1, ROWS)
    path = tmp_path / "bad.parquet"
    pq.write_table(mutate(good_table, row), path)
    cfg = _config(base_config, path, tmp_path, monkeypatch)
    message = _refused(cfg, str(path), f"row {row} ", f"field {field}", words, "data.skip_bad_rows=true")
    assert "more bad rows" not in message  # exactly one row was broken
    assert not (tmp_path / "dapo_tiny_cpu").exists()  # nothing written


def test_fuzz_several_bad_rows_reports_first_and_count(base_config, good_table, tmp_path, monkeypatch, capsys):
    """Random mutations on random rows (seeded): the first bad row is named, the rest counted."""
    rng = random.Random(7)
    table = good_table
    rows = sorted(rng.sample(range(ROWS), 5))
    picks = {}
    for row in rows:
        name, mutate, field, _ = rng.choice([m for m in MUTATIONS if m[0] != "non-UTF-8 text"])
        table = mutate(table, row)
        picks[row] = (name, field)
    path = tmp_path / "fuzz.parquet"
    pq.write_table(table, path)
    cfg = _config(base_config, path, tmp_path, monkeypatch)
    first = rows[0]
    message = _refused(cfg, f"row {first} field {picks[first][1]}", "and 4 more bad rows")

    # The same file with the documented flag: the 5 rows are dropped, counted, and the run
    # points at a cleaned copy holding exactly the other rows, in order.
    cfg = _config(base_config, path, tmp_path, monkeypatch, skip_bad_rows=True)
    from verl_ascend.checks.preflight import check_data

    capsys.readouterr()
    check_data(cfg)
    logs = capsys.readouterr().out.splitlines()
    skipped = [line for line in logs if "skipped" in line]
    assert len(skipped) == 1 and f"skipped 5 of {ROWS} rows of {str(path)!r}" in skipped[0], logs
    clean = Path(cfg.data.train_files)
    assert clean.parent == tmp_path / "dapo_tiny_cpu" / "clean_data"
    kept = pq.read_table(clean).column("extra_info").to_pylist()
    assert [e["index"] for e in kept] == [i for i in range(ROWS) if i not in rows]
    assert message


@pytest.mark.parametrize(
    "name, build, words",
    [
        ("truncated file", lambda good, p: p.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2]), "not a readable parquet"),
        ("random bytes", lambda good, p: p.write_bytes(random.Random(3).randbytes(4096)), "not a readable parquet"),
        ("empty file", lambda good, p: p.write_bytes(b""), "not a readable parquet"),
        ("zero rows", lambda good, p: pq.write_table(pq.read_table(good).slice(0, 0), p), "has no rows"),
        ("no reward_model", lambda good, p: pq.write_table(pq.read_table(good).drop(["reward_model"]), p), "lacks column(s) ['reward_model']"),
        ("no data_source", lambda good, p: pq.write_table(pq.read_table(good).drop(["data_source"]), p), "lacks column(s) ['data_source']"),
    ],
)
def test_bad_file_is_named(base_config, good_table, tmp_path, monkeypatch, name, build, words):
    good = tmp_path / "good.parquet"
    pq.write_table(good_table, good)
    path = tmp_path / "bad.parquet"
    build(good, path)
    for skip in (False, True):  # a broken file cannot be skipped row by row
        cfg = _config(base_config, path, tmp_path, monkeypatch, skip_bad_rows=skip)
        _refused(cfg, "data.train_files", str(path), words)


@pytest.mark.parametrize(
    "column, values, type_, field, words",
    [
        # The common export mistake: chat messages stored as a JSON string.
        ("prompt", lambda t: ['[{"role": "user", "content": "1 2"}]'] * t.num_rows, pa.string(), "'prompt'", "is a str"),
        ("prompt", lambda t: list(range(t.num_rows)), pa.int64(), "'prompt'", "type int"),
        ("prompt", lambda t: [[{"role": "user", "content": b"1 2"}]] * t.num_rows,
         pa.list_(pa.struct([("role", pa.string()), ("content", pa.binary())])), "'prompt[0].content'", "bytes"),
        ("reward_model", lambda t: ["3"] * t.num_rows, pa.string(), "'reward_model'", "expected a dict"),
        ("extra_info", lambda t: ["x"] * t.num_rows, pa.string(), "'extra_info'", "expected a dict or null"),
        ("data_source", lambda t: list(range(t.num_rows)), pa.int64(), "'data_source'", "non-empty string"),
    ],
    ids=["prompt-json-string", "prompt-int", "content-bytes", "reward-string", "extra-string", "source-int"],
)
def test_wrong_column_types(base_config, good_table, tmp_path, monkeypatch, column, values, type_, field, words):
    path = tmp_path / "typed.parquet"
    pq.write_table(_replace_column(good_table, column, values(good_table), type_), path)
    cfg = _config(base_config, path, tmp_path, monkeypatch)
    _refused(cfg, str(path), "row 0 ", f"field {field}", words, f"and {ROWS - 1} more bad rows")
    # Skipping cannot help when every row is bad.
    cfg = _config(base_config, path, tmp_path, monkeypatch, skip_bad_rows=True)
    _refused(cfg, f"every one of the {ROWS} rows", str(path))


def test_skip_leaving_too_few_rows_for_a_batch(base_config, good_table, tmp_path, monkeypatch):
    table = good_table.slice(0, 9)
    table = _with_prompt(table, 4, [])
    path = tmp_path / "small.parquet"
    pq.write_table(table, path)
    cfg = _config(base_config, path, tmp_path, monkeypatch, skip_bad_rows=True, train_batch_size=9)
    _refused(cfg, "only 8 usable rows", "data.train_batch_size=9")


def test_overlong_rows_allowed_when_upstream_filters_them(base_config, good_table, tmp_path, monkeypatch, capsys):
    path = tmp_path / "long.parquet"
    pq.write_table(_with_prompt(good_table, 3, [{"role": "user", "content": " ".join("7" * 12)}]), path)
    cfg = _config(base_config, path, tmp_path, monkeypatch, filter_overlong_prompts=True)
    from verl_ascend.checks.preflight import check_data

    check_data(cfg)
    out = capsys.readouterr().out
    assert re.search(r"1 of 40 rows of .* are over data.max_prompt_length=8 tokens and will be dropped by upstream", out), out


def test_entry_point_refuses_with_status_2_and_writes_nothing(entry, good_table, tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(_non_utf8_prompt(good_table, 17), path)
    before = path.read_bytes()
    result = entry(f"data.train_files={path}")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"{str(path)!r} row 17 field 'prompt'" in result.stderr, result.stderr[-3000:]
    assert result.stderr.startswith("[verl-ascend] error: ") and "Traceback" not in result.stderr
    assert entry.started == [] and not (tmp_path / "out").exists() and path.read_bytes() == before


def test_random_byte_flips_are_refused_or_accepted_never_crash(base_config, good_table, tmp_path, monkeypatch):
    """Flip random bytes of a valid file (seeded): the check either accepts the file or refuses
    it with a PreflightError naming it -- no other exception, no hang."""
    from verl_ascend.checks.preflight import PreflightError, check_data

    good = tmp_path / "good.parquet"
    pq.write_table(good_table, good)
    data = good.read_bytes()
    rng = random.Random(11)
    outcomes = {"accepted": 0, "refused": 0}
    for case in range(12):
        corrupt = bytearray(data)
        for _ in range(rng.choice([1, 4, 32])):
            corrupt[rng.randrange(len(corrupt))] ^= 1 << rng.randrange(8)
        path = tmp_path / f"flip{case}.parquet"
        path.write_bytes(bytes(corrupt))
        cfg = _config(base_config, path, tmp_path, monkeypatch)
        try:
            check_data(cfg)
            outcomes["accepted"] += 1
        except PreflightError as exc:
            assert str(path) in str(exc), str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, outcomes
