"""The demo's same_digit task: its reward on right, wrong and malformed answers, and its data rows."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest

from recipe.dapo_ascend.tiny.assets import VOCAB, build_tokenizer, write_split
from recipe.dapo_ascend.tiny.task import (
    DATA_SOURCE,
    DIGITS,
    SAME_DIGIT_SOURCE,
    TASKS,
    compute_score,
    make_example,
    make_same_digit_example,
)


@pytest.mark.parametrize(
    "response, score",
    [
        ("7<|im_end|>", 1.0),  # right, stopped
        ("7", 1.0),
        ("7777", 1.0),  # right first token; running on is the overlong penalty's business
        (" 7", 1.0),
        ("3<|im_end|>", 0.0),  # wrong digit
        ("", 0.0),  # empty
        ("<|im_end|>", 0.0),  # stopped at once
        ("=7", 0.0),  # malformed: the answer is not first
        ("?7", 0.0),
        ("\n7", 1.0),  # leading whitespace is stripped, like the first_digit task
    ],
)
def test_reward_on_right_wrong_and_malformed_answers(response, score):
    result = compute_score(SAME_DIGIT_SOURCE, response, "7")
    assert result == {"score": score, "acc": score == 1.0}


def test_same_digit_examples_repeat_one_digit():
    rng = random.Random(0)
    examples = [make_same_digit_example(rng) for _ in range(2000)]
    lengths = Counter()
    answers = Counter()
    for prompt, answer in examples:
        tokens = prompt.split(" ")
        assert set(tokens) == {answer} and answer in DIGITS
        lengths[len(tokens)] += 1
        answers[answer] += 1
    assert sorted(lengths) == [3, 4, 5, 6]
    assert sorted(answers) == DIGITS and min(answers.values()) > 150  # ~200 each: every digit is asked
    # A random answer is right 1 time in 10 digits (1 in 16 tokens): the demo starts low.
    assert sum(compute_score(SAME_DIGIT_SOURCE, "0", a)["acc"] for _, a in examples) / len(examples) < 0.15


def test_first_digit_task_unchanged():
    """The tests' and the tail workload's data come from make_example as before (same stream)."""
    assert TASKS["first_digit"] == (DATA_SOURCE, make_example)
    rng = random.Random(1)
    assert [make_example(rng) for _ in range(3)] == [("9 1 4 1", "9"), ("7 7 6 3 1 7", "7"), ("6 6 9", "6")]


def test_written_rows_are_upstream_rl_rows_that_tokenize(tmp_path):
    path = tmp_path / "same_digit.parquet"
    write_split(path, 64, seed=1, split="train", task="same_digit")
    rows = pd.read_parquet(path).to_dict("records")
    assert len(rows) == 64
    tok = build_tokenizer()
    for index, row in enumerate(rows):
        assert row["data_source"] == SAME_DIGIT_SOURCE
        assert row["extra_info"] == {"index": index, "split": "train"}
        (message,) = row["prompt"]
        answer = row["reward_model"]["ground_truth"]
        assert message["role"] == "user" and set(message["content"].split(" ")) == {answer}
        ids = tok.apply_chat_template([dict(message)], add_generation_prompt=True, tokenize=True)
        if not isinstance(ids, list):
            ids = ids["input_ids"]
        # "d d d =": every token is in the vocabulary (no "?" unknowns), within max_prompt_length 8.
        assert [VOCAB[i] for i in ids] == message["content"].split(" ") + ["="]
        assert len(ids) <= 8


def test_demo_config_trains_same_digit_with_dapo_on():
    """make demo's config: the tests' tiny config on the same_digit data, DAPO's two mechanisms on."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    config_dir = str(Path(__file__).resolve().parents[2] / "recipe" / "dapo_ascend" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        demo = compose(config_name="dapo_demo_cpu", overrides=["tiny_dir=/t"])
        tests = compose(config_name="dapo_tiny_cpu", overrides=["tiny_dir=/t"])
    assert demo.data.train_files == "/t/data/same_digit_train.parquet"
    assert demo.data.val_files == "/t/data/same_digit_val.parquet"
    assert tests.data.train_files == "/t/data/train.parquet"
    assert demo.algorithm.filter_groups.enable and demo.algorithm.filter_groups.metric == "acc"
    assert demo.reward.reward_kwargs.overlong_buffer_cfg.enable
    assert demo.reward.reward_kwargs.overlong_buffer_cfg.len == 4 and demo.data.max_response_length == 8
    assert demo.trainer.experiment_name == "dapo_tiny_cpu"  # outputs/dapo_tiny_cpu, as the docs say
    assert demo.trainer.v1.dapo_ascend.poll_interval_s == 0.02
    # Its own base model, and the settings that let DAPO move it within the demo.
    assert demo.actor_rollout_ref.model.path == "/t/demo_model" and tests.actor_rollout_ref.model.path == "/t/model"
    assert demo.data.train_batch_size == 8 and demo.actor_rollout_ref.rollout.n == 16
    optim = demo.actor_rollout_ref.actor.optim
    assert optim.optimizer == "SGD" and optim.lr == 0.15 and optim.weight_decay == 0.0
    assert tests.actor_rollout_ref.actor.optim.optimizer == "AdamW"  # upstream's default elsewhere
    # Rule-based reward scored in the agent loop (no reward actors); the tests' config keeps upstream's.
    assert demo.trainer.v1.dapo_ascend.reward_in_agent_loop and not tests.trainer.v1.dapo_ascend.reward_in_agent_loop
    # The rollout's log-probs serve as the old policy's (no recomputation pass); the tests' config recomputes.
    assert demo.algorithm.rollout_correction.bypass_mode and not tests.algorithm.rollout_correction.bypass_mode
    assert demo.ray_kwargs.ray_init.runtime_env.env_vars.TQ_NUM_THREADS == "1"


def _answer_probs(model_dir, rows: int = 200):
    """Per prompt of the same_digit data: P(right digit first), P(EOS right after it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = VOCAB.index("<|im_end|>")
    rng = random.Random(5)
    right, stop = [], []
    with torch.no_grad():
        for _ in range(rows):
            prompt, answer = make_same_digit_example(rng)
            text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"] + [VOCAB.index(answer)]
            logits = model(torch.tensor([ids])).logits[0, -2:].softmax(-1)
            right.append(float(logits[0, VOCAB.index(answer)]))
            stop.append(float(logits[1, eos]))
    return sum(right) / rows, sum(stop) / rows


def test_demo_base_model_starts_part_way(tiny_dir):
    """The demo's base model (demo_model/) answers right well above chance and well below the
    demo's target, so DAPO has something to do; the random model next to it is at chance."""
    right, stop = _answer_probs(tiny_dir / "demo_model")
    assert 0.55 < right < 0.8, right  # measured 0.70 (chance: 1/16)
    assert stop > 0.5, stop  # it has learnt to stop after its answer, mostly
    random_right, _ = _answer_probs(tiny_dir / "model")
    assert random_right < 0.15, random_right


def test_demo_base_model_is_rebuilt_identically(tmp_path):
    from recipe.dapo_ascend.tiny.assets import build

    a = build(tmp_path / "a", train_rows=64, val_rows=8)
    b = build(tmp_path / "b", train_rows=64, val_rows=8)
    weights = "demo_model/model.safetensors"
    assert (a / weights).read_bytes() == (b / weights).read_bytes()
    assert (a / weights).read_bytes() != (a / "model/model.safetensors").read_bytes()
