"""Turn one input record into one row of upstream verl's RL parquet format, or say why not.

Upstream's ``RLHFDataset`` reads ``prompt`` (a chat list), and the reward loop reads
``data_source`` (to pick a scorer), ``reward_model.ground_truth`` and ``extra_info``. A row that
reaches training with an empty answer or a malformed prompt does not fail: it just scores -1
forever and drags the group statistics. So every row is checked here, and a bad one is reported
with its file and index instead of being written.

Accepted input layouts (looked up on the hub cards of the releases people download):
- upstream RL layout, e.g. ``BytedTsinghua-SIA/DAPO-Math-17k`` and ``BytedTsinghua-SIA/AIME-2024``:
  ``prompt`` = list of ``{role, content}``, ``reward_model.ground_truth``, ``extra_info.index``;
- flat layouts, e.g. ``Maxwell-Jia/AIME_2024`` (``ID, Problem, Solution, Answer``),
  ``HuggingFaceH4/aime_2024`` and ``AI-MO/aimo-validation-aime`` (``id, problem, solution, answer``),
  and question/answer exports of DAPO-Math (``question``/``prompt`` text + ``answer``).
A flat problem is wrapped in the instruction DAPO-Math-17k's prompts carry, so validation prompts
ask for the same ``Answer:`` line the model is trained (and ``math_dapo`` scores) on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from recipe.dapo_ascend.data.readers import SourceRow, UnparsableLine

# The instruction around every DAPO-Math-17k prompt (read off the dataset's rows). Kept identical so
# that AIME prompts match the training distribution and math_dapo's "Answer:" parser applies.
DAPO_INSTRUCTION_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_INSTRUCTION_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

# Columns that may hold the problem text / the final answer in flat layouts, in lookup order.
# "solution" is deliberately absent from ANSWER_COLUMNS: in the AIME releases it is a worked
# solution, not the answer, and scoring against it would make every response wrong.
PROBLEM_COLUMNS = ("problem", "Problem", "question", "Question", "prompt")
ANSWER_COLUMNS = ("answer", "Answer", "ground_truth", "final_answer")
ID_COLUMNS = ("id", "ID", "problem_id", "uid")
CHAT_ROLES = ("system", "user", "assistant")


class BadRow(ValueError):
    """The record cannot become a training row; the message says what is wrong with it."""


@dataclass(frozen=True)
class DatasetSpec:
    """What differs between the datasets this module prepares."""

    name: str
    # Routed by upstream's default_compute_score to math_dapo scoring ("math_dapo", or any
    # name starting with "aime"); see verl/utils/reward_score/__init__.py.
    data_source: str
    split: str
    # AIME answers are integers 0..999: anything else is a transcription error in the source.
    integer_answers: bool


DAPO_MATH = DatasetSpec(name="dapo-math", data_source="math_dapo", split="train", integer_answers=False)
AIME_2024 = DatasetSpec(name="aime2024", data_source="aime_2024", split="test", integer_answers=True)


@dataclass(frozen=True)
class CleanRow:
    """A checked record: the chat prompt, the answer, and where it came from."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs
    ground_truth: str
    source_id: str
    source_index: int

    def dedup_key(self) -> tuple:
        return (self.messages, self.ground_truth)


def clean_row(row: SourceRow, spec: DatasetSpec) -> CleanRow:
    """Check ``row`` and extract its prompt and answer; raise BadRow with the reason."""
    record = row.record
    if isinstance(record, UnparsableLine):
        raise BadRow(record.error)
    if not isinstance(record, dict):
        raise BadRow(f"expected a record (object), got {type(record).__name__}")
    messages = _messages(record)
    ground_truth = _ground_truth(record, spec)
    return CleanRow(
        messages=messages,
        ground_truth=ground_truth,
        source_id=_source_id(record),
        source_index=row.index,
    )


def to_rl_row(clean: CleanRow, spec: DatasetSpec, index: int) -> dict[str, Any]:
    """The row exactly as upstream's RL dataset and reward loop read it."""
    return {
        "data_source": spec.data_source,
        "prompt": [{"role": role, "content": content} for role, content in clean.messages],
        "ability": "MATH",
        "reward_model": {"style": "rule", "ground_truth": clean.ground_truth},
        "extra_info": {
            "index": index,
            "split": spec.split,
            "source_index": clean.source_index,
            "source_id": clean.source_id,
        },
    }


def wrap_problem(problem: str) -> str:
    """A bare problem statement as a DAPO-style instruction prompt (never wrapped twice)."""
    problem = problem.strip()
    if problem.startswith(DAPO_INSTRUCTION_PREFIX.strip()):
        return problem
    return f"{DAPO_INSTRUCTION_PREFIX}{problem}{DAPO_INSTRUCTION_SUFFIX}"


def _messages(record: dict) -> tuple[tuple[str, str], ...]:
    prompt = record.get("prompt")
    if isinstance(prompt, list | tuple):
        return _chat(prompt)
    for column in PROBLEM_COLUMNS:
        value = record.get(column)
        if value is None:
            continue
        if not isinstance(value, str):
            raise BadRow(f"column {column!r} must be text or a chat list, got {type(value).__name__}")
        if not value.strip():
            raise BadRow(f"column {column!r} is empty")
        return (("user", wrap_problem(value)),)
    raise BadRow(
        "no problem text: expected a chat list in 'prompt' or text in one of "
        + ", ".join(repr(c) for c in PROBLEM_COLUMNS)
    )


def _chat(prompt: list | tuple) -> tuple[tuple[str, str], ...]:
    if not prompt:
        raise BadRow("'prompt' is an empty chat list")
    messages = []
    for position, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise BadRow(f"'prompt'[{position}] must be an object with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise BadRow(f"'prompt'[{position}].role is {role!r}; accepted: {', '.join(CHAT_ROLES)}")
        if not isinstance(content, str) or not content.strip():
            raise BadRow(f"'prompt'[{position}].content must be non-empty text")
        messages.append((role, content))
    if not any(role == "user" for role, _ in messages):
        raise BadRow("'prompt' has no user message")
    return tuple(messages)


def _ground_truth(record: dict, spec: DatasetSpec) -> str:
    raw, where = _find_answer(record)
    answer = _answer_text(raw, where)
    if spec.integer_answers:
        answer = _integer_answer(answer, where)
    return answer


def _find_answer(record: dict) -> tuple[Any, str]:
    reward_model = record.get("reward_model")
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
        return reward_model["ground_truth"], "reward_model.ground_truth"
    for column in ANSWER_COLUMNS:
        if record.get(column) is not None:
            return record[column], column
    raise BadRow(
        "no answer: expected 'reward_model.ground_truth' or one of "
        + ", ".join(repr(c) for c in ANSWER_COLUMNS)
    )


def _answer_text(raw: Any, where: str) -> str:
    if isinstance(raw, bool):
        raise BadRow(f"{where!r} is a boolean ({raw}), not an answer")
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise BadRow(f"{where!r} is {raw}")
        # JSON/pandas turn integer answers into floats (204 -> 204.0); math_dapo compares strings.
        return str(int(raw)) if raw.is_integer() else repr(raw)
    if isinstance(raw, str):
        if not raw.strip():
            raise BadRow(f"{where!r} is empty")
        return raw.strip()
    raise BadRow(f"{where!r} must be text or a number, got {type(raw).__name__}")


def _integer_answer(answer: str, where: str) -> str:
    text = answer.replace(",", "")
    if text.startswith("+"):
        text = text[1:]
    if not text.isdigit():
        raise BadRow(f"{where!r} is {answer!r}; AIME answers are integers from 0 to 999")
    value = int(text)
    if value > 999:
        raise BadRow(f"{where!r} is {value}; AIME answers are integers from 0 to 999")
    return str(value)


def _source_id(record: dict) -> str:
    extra = record.get("extra_info")
    if isinstance(extra, dict) and extra.get("index") is not None:
        return str(extra["index"])
    for column in ID_COLUMNS:
        if record.get(column) is not None:
            return str(record[column])
    return ""
