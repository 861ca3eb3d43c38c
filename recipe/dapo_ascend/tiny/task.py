"""The tiny tasks and their reward.

``first_digit`` (the tiny assets' ``data/train.parquet``, used by the tests and the tail
workload): "repeat the first digit, then stop". ``same_digit`` (``data/same_digit_*.parquet``,
what ``make demo`` trains on): the prompt is one digit repeated, e.g. ``"7 7 7 ="``, and the
answer is that digit. Both share the reward below (the response's first token must be the
answer).

Why the demo has its own task: vLLM's CPU build needs a head size of at least 32, so the demo
model has one wide head, and a two-layer model of that shape does not learn "first digit" (it
must attend to one position) in the demo's budget (measured ~0.26 accuracy). When every prompt
token is the answer, even attention spread evenly over the prompt carries it. The demo starts
from a base model briefly trained on this task (``assets.BASE_WARMUP``), as DAPO runs start
from a pretrained model.

A prompt is a short run of digits, e.g. ``"7 2 9 4"``; the right answer is its first digit
(``"7"``). A randomly initialised model with a 16-token vocabulary hits it about 1 time in
16, so a group of 8 samples often holds both a success and failures (a learning signal that
DAPO's dynamic sampling keeps) and often holds none (a group it filters out). Responses are
also shaped by DAPO's overlong buffer: a random model rarely emits EOS, so early responses run
to the length limit and are penalised; learning to stop is the second thing the model learns.

``compute_score`` follows upstream's reward-function signature and returns ``score`` and
``acc`` (the metric ``algorithm.filter_groups.metric=acc`` filters on).
"""

from __future__ import annotations

import random

DATA_SOURCE = "verl_ascend/first_digit"
SAME_DIGIT_SOURCE = "verl_ascend/same_digit"
DIGITS = [str(d) for d in range(10)]


def make_example(rng: random.Random, min_len: int = 3, max_len: int = 6) -> tuple[str, str]:
    n = rng.randint(min_len, max_len)
    digits = [rng.choice(DIGITS) for _ in range(n)]
    return " ".join(digits), digits[0]


def make_same_digit_example(rng: random.Random, min_len: int = 3, max_len: int = 6) -> tuple[str, str]:
    """One digit repeated ``min_len``..``max_len`` times, and that digit as the answer."""
    n = rng.randint(min_len, max_len)
    digit = rng.choice(DIGITS)
    return " ".join([digit] * n), digit


# task name -> (data_source, example maker)
TASKS = {
    "first_digit": (DATA_SOURCE, make_example),
    "same_digit": (SAME_DIGIT_SOURCE, make_same_digit_example),
}


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None, **kwargs) -> dict:
    """1.0 when the response starts with the expected digit, else 0.0.

    Every token of the tiny vocabulary is one character and the tokenizer decodes without
    separators, so the first character of the response is its first token.
    """
    correct = solution_str.lstrip()[:1] == str(ground_truth)
    return {"score": 1.0 if correct else 0.0, "acc": correct}
