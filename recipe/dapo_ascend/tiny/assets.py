"""Build the tiny model, tokenizer and dataset into a directory (deterministic, offline).

Layout of ``ROOT`` (default ``$VERL_ASCEND_TINY_DIR`` or ``~/.cache/verl-ascend/tiny``)::

    model/      a Qwen2-architecture causal LM (random init, fixed seed) + its tokenizer
    data/train.parquet, data/val.parquet   upstream's RL dataset format

``--workload tail`` builds the long-tail benchmark's model instead (``benchmarks/rollout_tail.py``):
same task and tokenizer, a larger model with room for long responses, whose initial response
lengths are long-tailed by construction (``shape_long_tail``): median ~5 tokens, ~4% of responses
run to hundreds of tokens.

Rebuilding with the same arguments gives byte-identical weights and data. Everything is
written to a temporary sibling directory first and renamed into place, so an interrupted
build never leaves a half-written model behind.

Run: ``python -m recipe.dapo_ascend.tiny.assets [--root DIR] [--force]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from recipe.dapo_ascend.tiny.task import DATA_SOURCE, DIGITS, make_example

# Qwen-style specials: upstream's agent loop picks its Qwen token builder from model_type
# "qwen2" and needs "<|im_end|>" and a one-token "\n" in the vocabulary. transformers loads
# a qwen2 tokenizer as byte-level BPE, where "\n" is spelled "\u010a" (and spaces, absent
# from the vocabulary, vanish).
SPECIALS = ["<pad>", "<|im_end|>", "<bos>"]
VOCAB = SPECIALS + DIGITS + ["=", "\u010a", "?"]
# Prompt rendered by the chat template: "<digits> =", the model answers after "=".
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}{% if not loop.last %} {% endif %}{% endfor %}"
    "{% if add_generation_prompt %} ={% endif %}"
)
SPEC_VERSION = 3
MODEL_SPECS = {
    # The embedded default (make demo): 75k parameters.
    "first_digit": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    ),
    # The long-tail benchmark: deep and narrow (~1.2M parameters, 12 layers), so a decode step costs
    # what many layers cost (as a large model's does) while training stays cheap; positions for
    # 8 prompt + 448 response tokens; untied output head (it carries the length distribution, see
    # ``shape_long_tail``).
    "tail": dict(
        hidden_size=96,
        intermediate_size=256,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    ),
}


def default_root() -> Path:
    return Path(os.environ.get("VERL_ASCEND_TINY_DIR", Path.home() / ".cache" / "verl-ascend" / "tiny"))


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="?"))
    core.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<bos>", unk_token="?"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model(seed: int, workload: str = "first_digit"):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = {"tie_word_embeddings": True, **MODEL_SPECS[workload]}
    config = Qwen2Config(
        vocab_size=len(VOCAB),
        bos_token_id=VOCAB.index("<bos>"),
        eos_token_id=VOCAB.index("<|im_end|>"),
        pad_token_id=VOCAB.index("<pad>"),
        rope_theta=10000.0,
        **spec,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if workload == "tail":
        shape_long_tail(model)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id
    )
    return model


# The tail workload's next-token probabilities (see shape_long_tail). A response is a run of
# digits that stops with probability 1/10 after each digit (median ~5 tokens); after any digit it
# may instead start a run of "?" (probability 1/150 per digit, so ~4% of responses), which stops
# with probability 1/250 per token: those few responses run to hundreds of tokens. That is the
# shape of a reasoning model's lengths (most answers short, a few very long) and of the tail the
# article measured, where a step waits on its longest responses.
LONG_TAIL = {"stop_after_digit": 0.1, "enter_long": 1 / 150, "stop_in_long": 1 / 250}


def shape_long_tail(model) -> None:
    """Give a random Qwen2 the tail workload's length distribution, keeping it trainable.

    Token embeddings are set orthogonal (norm sqrt(hidden), what the final RMSNorm keeps), and
    the untied output head to ``table @ E / hidden``: with the randomly initialised layers' small
    contributions, the logits after token ``x`` are ``table[x]``. The layers stay random, so the
    answer (which needs attention to the prompt) is still learnt; the table only fixes how long
    the responses run at the start.
    """
    import math

    import torch

    cfg, v = model.config, len(VOCAB)
    digits = [VOCAB.index(d) for d in DIGITS]
    eos, eq, long_tok = VOCAB.index("<|im_end|>"), VOCAB.index("="), VOCAB.index("?")
    off = -12.0  # a token that should not follow (e^-12 per token)
    table = torch.full((v, v), off)
    p = LONG_TAIL
    table[eq, digits] = 0.0  # the first answer token: any digit, uniformly
    # After a digit: log-odds against one particular next digit of stopping or entering the long run.
    cont = (1.0 - p["stop_after_digit"] - p["enter_long"]) / len(digits)
    for d in digits:
        table[d, digits] = 0.0
        table[d, eos] = math.log(p["stop_after_digit"] / cont)
        table[d, long_tok] = math.log(p["enter_long"] / cont)
    table[long_tok, long_tok] = math.log((1.0 - p["stop_in_long"]) / p["stop_in_long"])
    table[long_tok, eos] = 0.0
    for other in set(range(v)) - set(digits) - {eq, long_tok}:
        table[other, eos] = 0.0
    gen = torch.Generator().manual_seed(1234)
    q, _ = torch.linalg.qr(torch.randn(cfg.hidden_size, v, generator=gen))
    emb = q.T * math.sqrt(cfg.hidden_size)  # (v, hidden), orthogonal rows of RMS 1
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head.weight.copy_(table.T @ emb / cfg.hidden_size)


def write_split(path: Path, rows: int, seed: int, split: str) -> None:
    import pandas as pd

    rng = random.Random(seed)
    records = []
    for index in range(rows):
        prompt, answer = make_example(rng)
        records.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": prompt}],
                "ability": "copy",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"index": index, "split": split},
            }
        )
    pd.DataFrame.from_records(records).to_parquet(path, index=False)


def build(
    root: Path,
    seed: int = 0,
    train_rows: int = 2048,
    val_rows: int = 64,
    force: bool = False,
    workload: str = "first_digit",
) -> Path:
    if workload not in MODEL_SPECS:
        raise ValueError(f"unknown workload {workload!r}; accepted: {', '.join(MODEL_SPECS)}")
    root = Path(root).expanduser()
    stamp = {"spec_version": SPEC_VERSION, "seed": seed, "train_rows": train_rows, "val_rows": val_rows}
    if workload != "first_digit":
        stamp["workload"] = workload
    if workload == "tail":
        # A changed model or distribution rebuilds the cached assets.
        stamp.update(long_tail=LONG_TAIL, model=MODEL_SPECS[workload])
    stamp_file = root / "assets.json"
    if not force and stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        (tmp / "model").mkdir()
        (tmp / "data").mkdir()
        build_tokenizer().save_pretrained(tmp / "model")
        build_model(seed, workload).save_pretrained(tmp / "model")
        write_split(tmp / "data" / "train.parquet", train_rows, seed + 1, "train")
        write_split(tmp / "data" / "val.parquet", val_rows, seed + 2, "test")
        (tmp / "assets.json").write_text(json.dumps(stamp))
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=default_root())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-rows", type=int, default=2048)
    parser.add_argument("--val-rows", type=int, default=64)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--workload", choices=sorted(MODEL_SPECS), default="first_digit")
    args = parser.parse_args(argv)
    root = build(args.root, args.seed, args.train_rows, args.val_rows, args.force, args.workload)
    print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
