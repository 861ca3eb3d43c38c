"""Row-by-row check of the recipe's parquet files, before Ray starts.

Every row must be what upstream's ``RLHFDataset`` + agent loop + reward loop can use:

- ``prompt`` (``data.prompt_key``): a non-empty list of ``{"role": str, "content": str}`` chat
  messages with some non-blank content; strings must be valid UTF-8;
- the prompt must fit ``data.max_prompt_length`` tokens, counted exactly as upstream's dataset
  counts them (the model's tokenizer, ``apply_chat_template(messages, add_generation_prompt=True,
  tokenize=True, **data.apply_chat_template_kwargs)``; the processor path for multimodal
  models). Over-long prompts are an error unless ``data.filter_overlong_prompts=true`` (then
  upstream drops them: counted here, not an error) or ``data.truncation`` is not ``error``
  (the agent loop left-truncates them: counted);
- ``data_source`` (``data.reward_fn_key``): a non-empty string (it picks the scorer);
- ``reward_model``: a dict with a non-empty ``ground_truth``;
- ``extra_info``, when present: a dict (or null).

A file that cannot be read as parquet, or lacks a column, is always an error. A bad row is an
error naming the file, the row and the field -- or, with ``data.skip_bad_rows=true``, it is
dropped: the kept rows are written (atomically) to
``$VERL_ASCEND_OUTPUT_DIR/<experiment>/clean_data/<name>.clean-<hash>.parquet``, the run uses
that file, and the log says how many rows were skipped and why.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_ascend.paths import RunPaths

SKIP_FLAG = "data.skip_bad_rows"
CHUNK = 4096


class DataError(ValueError):
    """A dataset file or row the run cannot use; the message names the file, row and field."""


@dataclass(frozen=True)
class RowProblem:
    row: int
    field: str
    message: str

    def describe(self) -> str:
        return f"row {self.row} field {self.field!r}: {self.message}"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- reading
def read_columns(table, names: list[str]) -> tuple[dict[str, list], list[RowProblem]]:
    """Python values of ``names``; rows whose bytes are not valid UTF-8 become problems (value None)."""
    columns: dict[str, list] = {}
    problems = []
    for name in names:
        column = table.column(name)
        values: list = []
        for start in range(0, len(column), CHUNK):
            piece = column.slice(start, CHUNK)
            try:
                values.extend(piece.to_pylist())
                continue
            except UnicodeDecodeError:
                pass
            for offset in range(len(piece)):
                try:
                    values.extend(piece.slice(offset, 1).to_pylist())
                except UnicodeDecodeError as exc:
                    values.append(None)
                    problems.append(RowProblem(start + offset, name, f"text is not valid UTF-8 ({exc.reason} at byte {exc.start})"))
        columns[name] = values
    return columns, problems


# ----------------------------------------------------------------------------- row checks
def check_prompt(prompt: Any, key: str) -> Optional[tuple[str, str]]:
    """(field, message) if ``prompt`` is not a usable chat, else None."""
    if prompt is None:
        return key, "is null; expected a list of chat messages like [{'role': 'user', 'content': '...'}]"
    if isinstance(prompt, (str, bytes)):
        return key, f"is a {type(prompt).__name__} ({_short(prompt)}); expected a list of chat messages like [{{'role': 'user', 'content': '...'}}]"
    if not isinstance(prompt, (list, tuple)):
        return key, f"has type {type(prompt).__name__} ({_short(prompt)}); expected a list of chat messages"
    if len(prompt) == 0:
        return key, "is an empty list; expected at least one chat message"
    for i, message in enumerate(prompt):
        where = f"{key}[{i}]"
        if not isinstance(message, dict):
            return where, f"has type {type(message).__name__} ({_short(message)}); expected {{'role': ..., 'content': ...}}"
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            return f"{where}.role", f"is {_short(role)}; expected a role string such as 'user'"
        if isinstance(content, bytes):
            return f"{where}.content", f"is bytes ({_short(content)}); expected UTF-8 text (str)"
        if not isinstance(content, str):
            return f"{where}.content", f"has type {type(content).__name__} ({_short(content)}); expected text (str)"
    if not any(m["content"].strip() for m in prompt):
        return key, "is empty: every message's content is blank"
    return None


def check_reward(reward: Any, source: Any, extra: Any, source_key: str) -> Optional[tuple[str, str]]:
    if not isinstance(source, str) or not source.strip():
        return source_key, f"is {_short(source)}; expected a non-empty string naming the data source (it picks the scorer)"
    if not isinstance(reward, dict):
        return "reward_model", f"is {_short(reward)}; expected a dict with a 'ground_truth' entry"
    truth = reward.get("ground_truth")
    if truth is None:
        return "reward_model", f"is {_short(reward)}; expected a dict with a 'ground_truth' entry"
    if isinstance(truth, bytes):
        return "reward_model.ground_truth", f"is bytes ({_short(truth)}); expected text"
    if isinstance(truth, str) and not truth.strip():
        return "reward_model.ground_truth", "is an empty string"
    if extra is not None and not isinstance(extra, dict):
        return "extra_info", f"has type {type(extra).__name__} ({_short(extra)}); expected a dict or null"
    return None


def prompt_length_fn(config: DictConfig) -> Callable[[list], int]:
    """Token count of a chat prompt, the way upstream's ``RLHFDataset`` counts it."""
    from verl.utils import hf_processor, hf_tokenizer
    from verl.utils.tokenizer import normalize_token_ids

    model = config.actor_rollout_ref.model
    path = os.path.expanduser(str(model.get("tokenizer_path") or model.path))
    trust = bool(model.get("trust_remote_code", False))
    tokenizer = hf_tokenizer(path, trust_remote_code=trust)
    processor = hf_processor(path, trust_remote_code=trust)
    if processor is not None and not getattr(processor, "chat_template", None) and getattr(tokenizer, "chat_template", None):
        processor.chat_template = tokenizer.chat_template
    custom = model.get("custom_chat_template")
    if custom is not None:
        (processor if processor is not None else tokenizer).chat_template = custom
    raw = config.data.get("apply_chat_template_kwargs", None) or {}
    kwargs = dict(OmegaConf.to_container(raw, resolve=True) if OmegaConf.is_config(raw) else raw)
    for key in ("tokenize", "return_dict", "return_tensors"):
        kwargs.pop(key, None)

    if processor is not None:

        def length(messages: list) -> int:
            text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
            return len(processor.tokenizer(text=text, add_special_tokens=False, return_attention_mask=False)["input_ids"])

    else:

        def length(messages: list) -> int:
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
            return len(normalize_token_ids(ids))

    return length


@dataclass
class FileReport:
    path: str
    rows: int
    problems: list[RowProblem]
    overlong_allowed: int  # over max_prompt_length but dropped (filter) or truncated upstream


def check_file(path: str, config: DictConfig, length_fn: Optional[Callable[[list], int]]) -> tuple[Any, FileReport]:
    """Read and check one parquet file; file-level problems raise ``DataError``."""
    import pyarrow.parquet as pq

    data = config.data
    prompt_key = data.get("prompt_key", "prompt")
    source_key = data.get("reward_fn_key", "data_source")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"{path!r} is not a readable parquet file: {exc}") from exc
    missing = [c for c in (prompt_key, source_key, "reward_model") if c not in table.column_names]
    if missing:
        raise DataError(
            f"{path!r} lacks column(s) {missing}; the DAPO recipe needs {prompt_key!r} (chat messages), "
            f"{source_key!r} and 'reward_model' ({{'ground_truth': ...}}). Columns present: {table.column_names}"
        )
    if table.num_rows == 0:
        raise DataError(f"{path!r} has no rows")
    names = [prompt_key, source_key, "reward_model"] + (["extra_info"] if "extra_info" in table.column_names else [])
    columns, problems = read_columns(table, names)
    undecodable = {p.row for p in problems}
    max_len = int(data.get("max_prompt_length", 1024))
    filter_overlong = bool(data.get("filter_overlong_prompts", True))
    truncation = str(data.get("truncation", "error"))
    overlong_allowed = 0
    for row in range(table.num_rows):
        if row in undecodable:
            continue
        prompt = columns[prompt_key][row]
        bad = check_prompt(prompt, prompt_key) or check_reward(
            columns["reward_model"][row],
            columns[source_key][row],
            columns["extra_info"][row] if "extra_info" in columns else None,
            source_key,
        )
        if bad is None and length_fn is not None:
            try:
                n = length_fn(list(prompt))
            except Exception as exc:
                bad = (prompt_key, f"the chat template cannot render it: {type(exc).__name__}: {exc}")
            else:
                if n > max_len:
                    if filter_overlong or truncation != "error":
                        overlong_allowed += 1
                    else:
                        bad = (
                            prompt_key,
                            f"is {n} tokens with the chat template, over data.max_prompt_length={max_len} "
                            "(set data.filter_overlong_prompts=true to drop such rows, or raise the limit)",
                        )
        if bad is not None:
            problems.append(RowProblem(row, *bad))
    problems.sort(key=lambda p: p.row)
    return table, FileReport(path=path, rows=table.num_rows, problems=problems, overlong_allowed=overlong_allowed)


# ----------------------------------------------------------------------------- skipping
def clean_copy(table, report: FileReport, out_dir: str) -> str:
    """Write the rows without problems next to the run's outputs, atomically; returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = sorted({p.row for p in report.problems})
    digest = hashlib.sha256()
    with open(report.path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    digest.update(repr(bad).encode())
    stem = os.path.splitext(os.path.basename(report.path))[0]
    target = os.path.join(out_dir, f"{stem}.clean-{digest.hexdigest()[:12]}.parquet")
    if os.path.exists(target):
        return target
    os.makedirs(out_dir, exist_ok=True)
    bad_set = set(bad)
    keep = pa.array([i for i in range(report.rows) if i not in bad_set], type=pa.int64())
    tmp = f"{target}.tmp.{os.getpid()}"
    try:
        pq.write_table(table.take(keep), tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def summarize(problems: list[RowProblem], limit: int = 5) -> str:
    shown = "; ".join(p.describe() for p in problems[:limit])
    if len(problems) > limit:
        reasons = Counter(p.field for p in problems)
        shown += f"; ... ({len(problems)} in all, by field: {dict(reasons)})"
    return shown


def check_all_files(config: DictConfig, check_lengths: bool = True, log=print) -> dict[str, int]:
    """Check ``data.train_files`` and ``data.val_files``; returns ``{key: rows usable}``.

    Raises ``DataError`` naming file, row and field; with ``data.skip_bad_rows=true`` bad rows
    are dropped (logged with counts) and the config is pointed at the cleaned copies.
    """
    skip = bool(OmegaConf.select(config, SKIP_FLAG, default=False))
    length_fn = prompt_length_fn(config) if check_lengths else None
    out_dir = RunPaths.of(config).clean_data
    usable: dict[str, int] = {}
    for key in ("train_files", "val_files"):
        value = config.data.get(key)
        if value is None:
            continue
        files = [value] if isinstance(value, str) else [str(v) for v in value]
        new_files, rows = [], 0
        for file in files:
            path = os.path.expanduser(file)
            if os.path.isdir(path):
                raise DataError(
                    f"data.{key}: {path!r} is a folder; accepted: a parquet file, or a list of them "
                    f"(data.{key}=[a.parquet,b.parquet])"
                )
            if not os.path.isfile(path):
                raise DataError(f"data.{key}: file {path!r} does not exist (expected a parquet file)")
            try:
                table, report = check_file(path, config, length_fn)
            except DataError as exc:
                raise DataError(f"data.{key}: {exc}") from exc
            if report.overlong_allowed:
                how = "dropped by upstream (data.filter_overlong_prompts=true)" if config.data.get("filter_overlong_prompts", True) else f"left-truncated (data.truncation={config.data.get('truncation')})"
                log(f"[verl-ascend] data.{key}: {report.overlong_allowed} of {report.rows} rows of {path!r} are over data.max_prompt_length={config.data.get('max_prompt_length')} tokens and will be {how}")
            bad_rows = len({p.row for p in report.problems})
            if bad_rows and not skip:
                raise DataError(
                    f"data.{key}: {path!r} {report.problems[0].describe()}"
                    + (f" (and {bad_rows - 1} more bad rows: {summarize(report.problems[1:], 3)})" if bad_rows > 1 else "")
                    + f". Fix the data, or set {SKIP_FLAG}=true to drop bad rows."
                )
            if bad_rows:
                kept = report.rows - bad_rows
                if kept == 0:
                    raise DataError(f"data.{key}: every one of the {report.rows} rows of {path!r} is bad: {summarize(report.problems)}")
                try:
                    clean = clean_copy(table, report, out_dir)
                except OSError as exc:
                    raise DataError(
                        f"data.{key}: {SKIP_FLAG}=true needs a cleaned copy of {path!r} in {out_dir!r}, which cannot be "
                        f"written ({exc.strerror or exc}); accepted: a writable $VERL_ASCEND_OUTPUT_DIR"
                    ) from exc
                log(
                    f"[verl-ascend] data.{key}: skipped {bad_rows} of {report.rows} rows of {path!r} ({SKIP_FLAG}=true): "
                    f"{summarize(report.problems)}; the {kept} good rows are in {clean}"
                )
                new_files.append(clean)
                rows += kept - (report.overlong_allowed if config.data.get("filter_overlong_prompts", True) else 0)
            else:
                new_files.append(file)
                rows += report.rows - (report.overlong_allowed if config.data.get("filter_overlong_prompts", True) else 0)
        if new_files != files:
            with open_dict(config):
                config.data[key] = new_files if not isinstance(value, str) else new_files[0]
        usable[key] = rows
    batch = int(config.data.get("train_batch_size", 1))
    if "train_files" in usable and usable["train_files"] < batch:
        raise DataError(
            f"data.train_files: only {usable['train_files']} usable rows, fewer than data.train_batch_size={batch}: "
            "no training step could be filled"
        )
    return usable
