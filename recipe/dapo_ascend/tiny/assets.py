"""Build the tiny model, tokenizer and dataset into a directory (deterministic, offline).

Layout of ``ROOT`` (default ``$VERL_ASCEND_TINY_DIR`` or ``~/.cache/verl-ascend/tiny``)::

    model/      a Qwen2-architecture causal LM (random init, fixed seed) + its tokenizer
    demo_model/ the demo's base model: ``model`` after a short supervised warm-up on the
                same_digit task (``BASE_WARMUP``), so it starts part-way, as a real base model does
    data/train.parquet, data/val.parquet   upstream's RL dataset format ("first_digit" task)
    data/same_digit_train.parquet, data/same_digit_val.parquet   the demo's task (tiny/task.py)

``--workload tail`` builds the long-tail benchmark's model and data instead
(``benchmarks/rollout_tail.py``): same task and tokenizer, a larger model with room for long
responses, and a long tail that lives in the data (``LONG_TAIL``): one prompt in eight is a "hard"
one (it ends in ``?``), on which the model "thinks" in a run of ``?`` tokens that mostly reaches
the length limit without an answer, while the others are answered with one digit and EOS.
``--workload steady`` builds the trainer-modes benchmark's balanced workload
(``benchmarks/trainer_modes.py``): the same larger model, no hard prompts, and answers that run on
in digits to the length limit (``STEADY``), so every response costs the same decode steps and
training tokens, and a step's cost is the model's work, not the per-sample bookkeeping around it.

Rebuilding with the same arguments gives byte-identical weights and data. Everything is
written to a temporary sibling directory first and renamed into place, so an interrupted
build never leaves a half-written model behind.

Run: ``verl-ascend assets [--root DIR] [--force]``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from recipe.dapo_ascend.tiny.task import DIGITS, TASKS
from verl_ascend import envs
from verl_ascend.checks.exits import OK
from verl_ascend.cli import parser as cli_parser

# Qwen-style specials: upstream's agent loop picks its Qwen token builder from model_type
# "qwen2" and needs "<|im_end|>" and a one-token "\n" in the vocabulary. transformers loads
# a qwen2 tokenizer as byte-level BPE, where "\n" is spelled "\u010a" (and spaces, absent
# from the vocabulary, vanish).
SPECIALS = ["<pad>", "<|im_end|>", "<bos>"]
VOCAB = SPECIALS + DIGITS + ["=", "\u010a", "?"]
# Prompt rendered by the chat template: "<digits> =", the model answers after "=". A prompt of
# the tail workload that already ends in its "?" marker gets no "=".
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}{% if not loop.last %} {% endif %}{% endfor %}"
    "{% if add_generation_prompt and messages[-1]['content'][-1:] != '?' %} ={% endif %}"
)
# 6: the demo's same_digit data next to the first_digit data. 7: demo_model/, the demo's base model.
SPEC_VERSION = 8
# vLLM's CPU attention (rollout.name=vllm) accepts head sizes 32 to 512 (CPUAttentionBackend.
# get_supported_head_sizes), not the 16 of 64 hidden / 4 heads; its Qwen2 takes the head size as
# hidden_size // num_attention_heads, so the head count sets it.
MODEL_SPECS = {
    # The embedded default (make demo): 83k parameters, one attention head of size 64.
    "first_digit": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=64,
    ),
    # The long-tail benchmark: deep and narrow (~1.2M parameters, 12 layers), so a decode step costs
    # what many layers cost (as a large model's does) while training stays cheap; positions for
    # 8 prompt + 448 response tokens; untied output head (it carries the next-token table, see
    # ``shape_long_tail``).
    "tail": dict(
        hidden_size=96,
        intermediate_size=256,
        num_hidden_layers=12,
        # Head size 32, the smallest vLLM's CPU attention takes (benchmarks/rollout_tail.py --engine vllm).
        num_attention_heads=3,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    ),
}
# The balanced trainer-modes workload runs on the tail model (its table shaped by ``STEADY``).
MODEL_SPECS["steady"] = MODEL_SPECS["tail"]


def default_root() -> Path:
    return Path(os.path.expanduser(envs.raw("VERL_ASCEND_TINY_DIR")))


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


# The architectures a tiny model is built in (transformers' config and model classes): the assets'
# Qwen2, and Llama, whose layers the fused NPU ops patch as well (tests/npu builds both).
ARCHS = {"qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "llama": ("LlamaConfig", "LlamaForCausalLM")}


def build_model(seed: int, workload: str = "first_digit", long_tail: dict | None = None, *,
                arch: str = "qwen2", **overrides):
    """The tiny causal LM of ``workload`` over ``VOCAB``, random weights from ``seed`` (same arguments, same weights).

    ``arch`` (a key of ``ARCHS``) and ``overrides`` (config fields over the workload's ``MODEL_SPECS``
    entry, e.g. ``num_attention_heads=4``) give the same model in another architecture or shape; the
    assets use neither.
    """
    import torch
    import transformers

    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; accepted: {', '.join(ARCHS)}")
    config_class, model_class = (getattr(transformers, name) for name in ARCHS[arch])
    spec = {"tie_word_embeddings": True, **MODEL_SPECS[workload], **overrides}
    config = config_class(
        vocab_size=len(VOCAB),
        bos_token_id=VOCAB.index("<bos>"),
        eos_token_id=VOCAB.index("<|im_end|>"),
        pad_token_id=VOCAB.index("<pad>"),
        rope_theta=10000.0,
        **spec,
    )
    torch.manual_seed(seed)
    model = model_class(config)
    if workload in SHAPED:
        shape_long_tail(model, long_tail or SHAPED[workload])
    model.generation_config = transformers.GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id
    )
    return model


# The demo's base model (``demo_model/``). DAPO improves a base model that already answers in
# the task's format some of the time; it does not teach a random network from nothing (from the
# random start, the demo's budget reached ~0.6 accuracy at best, measured). A few supervised
# steps on same_digit answers ("<digit><|im_end|>") leave a model that samples the right digit
# ~70% of the time, unevenly across digits (0.5 for the hardest), and still sometimes runs past
# its answer (so the overlong penalty acts). DAPO takes it above 0.9 within the demo's 12 steps.
# Deterministic: fixed seeds, one thread.
BASE_WARMUP = {"steps": 36, "batch": 16, "lr": 3e-3, "seed": 7}


def warm_up(model, tokenizer, p: dict = BASE_WARMUP) -> None:
    """Train ``model`` in place for ``p["steps"]`` AdamW steps on fresh same_digit answers (digit + EOS)."""
    import torch

    make_example = TASKS["same_digit"][1]
    rng = random.Random(p["seed"])
    eos = VOCAB.index("<|im_end|>")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(p["seed"])
        optim = torch.optim.AdamW(model.parameters(), lr=p["lr"])
        model.train()
        for _ in range(p["steps"]):
            loss = 0.0
            for prompt, answer in (make_example(rng) for _ in range(p["batch"])):
                text = tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
                )
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                target = [VOCAB.index(answer), eos]
                logits = model(torch.tensor([ids + target])).logits[0, len(ids) - 1 : len(ids) + 1]
                loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(target))
            optim.zero_grad()
            (loss / p["batch"]).backward()
            optim.step()
        model.eval()
    finally:
        torch.set_num_threads(threads)


# The tail workload. Its long tail lives in the data, not in the weights: a fraction of the
# prompts are hard (they end in "?" where the others end in "="), and on a hard prompt the model
# "thinks" in a run of "?" tokens that stops (with EOS, never with an answer) with probability
# 1/500 per token, so ~40% of those responses reach the 448-token limit, and a group of eight
# almost always holds one that does. Its reward is 0, the group is filtered out by dynamic sampling:
# the shape of truncated reasoning on prompts the model cannot solve yet, a step's long tail that
# trains nothing. The other prompts are answered the way the task asks, one digit then EOS (a
# second digit 1 time in 1000), rewarded on that digit as in the embedded default.
# Why in the data, and why with wide margins: any length decision that training can move drifts
# under RL within 20 steps (an earlier workload made 4% of all responses long by a per-token
# probability, another let easy answers run on with probability 9/10 a digit: both moved 2x in
# either direction), so the policy-off and policy-on runs ended up timing different workloads.
# The hard prompts are the same in both runs, their tokens are never trained, and the easy
# answers' stop is 9 nats ahead of going on.
LONG_TAIL = {"hard_fraction": 0.125, "stop_after_digit": 0.999, "stop_in_long": 1 / 500}
# The balanced workload of benchmarks/trainer_modes.py: the tail model's table with no hard prompts
# and a stop after a digit 11.5 nats below going on (about 1 in 10^6 a token), so all responses run
# to data.max_response_length: rollout and training cost the same every step, in every mode.
STEADY = {**LONG_TAIL, "hard_fraction": 0.0, "stop_after_digit": 1e-6}
# Workloads whose model carries a next-token table (``shape_long_tail``), and its default shape.
SHAPED = {"tail": LONG_TAIL, "steady": STEADY}
HARD_MARK = "?"


def shape_long_tail(model, p: dict = LONG_TAIL) -> None:
    """Give a random Qwen2 the tail workload's next-token table, keeping it trainable.

    Token embeddings are set orthogonal (norm sqrt(hidden), what the final RMSNorm keeps), and
    the untied output head to ``table @ E / hidden``: with the randomly initialised layers' small
    contributions, the logits after token ``x`` are ``table[x]``. The layers stay random, so the
    answer (which needs attention to the prompt) is still learnt; the table fixes how long the
    responses run: after "=" a digit, after a digit another digit or EOS, after "?" another "?"
    or EOS. Every other continuation is 12 nats down (e^-12 per token).
    """
    import math

    import torch

    cfg, v = model.config, len(VOCAB)
    digits = [VOCAB.index(d) for d in DIGITS]
    eos, eq, long_tok = VOCAB.index("<|im_end|>"), VOCAB.index("="), VOCAB.index(HARD_MARK)
    off = -12.0
    table = torch.full((v, v), off)
    table[eq, digits] = 0.0  # the first answer token: any digit, uniformly
    # After a digit: log-odds of stopping against one particular next digit.
    cont = (1.0 - p["stop_after_digit"]) / len(digits)
    for d in digits:
        table[d, digits] = 0.0
        table[d, eos] = math.log(p["stop_after_digit"] / cont)
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


def write_split(
    path: Path, rows: int, seed: int, split: str, hard_fraction: float = 0.0, task: str = "first_digit"
) -> None:
    """Write one parquet split of ``task``; ``hard_fraction`` of the prompts (the tail workload's) end in "?"."""
    import pandas as pd

    data_source, make_example = TASKS[task]
    rng = random.Random(seed)
    hard = random.Random(seed + 1000)  # its own stream: the prompts are those of hard_fraction=0
    records = []
    for index in range(rows):
        prompt, answer = make_example(rng)
        if hard.random() < hard_fraction:
            prompt = f"{prompt} {HARD_MARK}"
        records.append(
            {
                "data_source": data_source,
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
    long_tail: dict | None = None,
) -> Path:
    """Build (or reuse, when its stamp matches) the assets of ``workload`` under ``root``.

    ``long_tail`` (tail and steady workloads only) overrides entries of their shape (``LONG_TAIL``,
    ``STEADY``); the tests use it for answers that run on, so that the cut finds short responses
    mid-generation.
    """
    if workload not in MODEL_SPECS:
        raise ValueError(f"unknown workload {workload!r}; accepted: {', '.join(MODEL_SPECS)}")
    unknown = sorted(set(long_tail or {}) - set(LONG_TAIL))
    if unknown:
        raise ValueError(f"unknown long_tail key(s) {', '.join(unknown)}; accepted: {', '.join(LONG_TAIL)}")
    long_tail = {**SHAPED.get(workload, LONG_TAIL), **(long_tail or {})}
    root = Path(root).expanduser()
    stamp = {"spec_version": SPEC_VERSION, "seed": seed, "train_rows": train_rows, "val_rows": val_rows}
    if workload != "first_digit":
        stamp["workload"] = workload
    else:
        stamp["base_warmup"] = BASE_WARMUP  # a changed warm-up rebuilds demo_model/
    if workload in SHAPED:
        # A changed model or distribution rebuilds the cached assets.
        stamp.update(long_tail=long_tail, model=MODEL_SPECS[workload])
    stamp_file = root / "assets.json"
    if not force and stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        (tmp / "model").mkdir()
        (tmp / "data").mkdir()
        tokenizer = build_tokenizer()
        tokenizer.save_pretrained(tmp / "model")
        model = build_model(seed, workload, long_tail)
        model.save_pretrained(tmp / "model")
        hard = long_tail["hard_fraction"] if workload in SHAPED else 0.0
        write_split(tmp / "data" / "train.parquet", train_rows, seed + 1, "train", hard)
        write_split(tmp / "data" / "val.parquet", val_rows, seed + 2, "test", hard)
        if workload == "first_digit":
            # The demo's task and its base model: the model above, warmed up (tiny/task.py, BASE_WARMUP say why).
            (tmp / "demo_model").mkdir()
            tokenizer.save_pretrained(tmp / "demo_model")
            warm_up(model, tokenizer)
            model.save_pretrained(tmp / "demo_model")
            write_split(tmp / "data" / "same_digit_train.parquet", train_rows, seed + 1, "train", task="same_digit")
            write_split(tmp / "data" / "same_digit_val.parquet", val_rows, seed + 2, "test", task="same_digit")
        (tmp / "assets.json").write_text(json.dumps(stamp))
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def main(argv=None) -> int:
    """``verl-ascend assets``: build (once; again only when its inputs change or ``--force``) and print the folder."""
    description = __doc__.split("\n\n")[0] + "\nAn unchanged build is kept: a second call returns at once."
    parser = cli_parser("assets", description,
                        ["verl-ascend assets --workload tail --root /tmp/tiny_tail   # the long-tail benchmark's"])
    parser.add_argument("--root", type=Path, default=default_root(),
                        help="where to build (default $VERL_ASCEND_TINY_DIR or ~/.cache/verl-ascend/tiny)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-rows", type=int, default=2048)
    parser.add_argument("--val-rows", type=int, default=64)
    parser.add_argument("--force", action="store_true", help="rebuild even when the folder is up to date")
    parser.add_argument("--workload", choices=sorted(MODEL_SPECS), default="first_digit",
                        help="first_digit: the demo's; tail: benchmarks/rollout_tail.py's; "
                             "steady: benchmarks/trainer_modes.py's")
    args = parser.parse_args(argv)
    root = build(args.root, args.seed, args.train_rows, args.val_rows, args.force, args.workload)
    print(root)
    return OK
