"""The hf rollout engine: numerics against a plain forward pass, and each sampling parameter's effect."""

from __future__ import annotations

import pytest
import torch

from verl.cpu.rollout.engine import GenerationRequest, HFGenerationEngine, SamplingSpec, _filter_logits
from verl.cpu.rollout.server import load_causal_lm

PROMPTS = [[6, 4, 7, 13], [3, 3, 13], [9, 8, 7, 6, 5, 13]]


@pytest.fixture(scope="module")
def model(tiny_dir):
    torch.manual_seed(0)
    m = load_causal_lm(str(tiny_dir / "model"))
    # A random tiny model is near-uniform; sharpen it so sampling parameters have visible effects.
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(6.0)
    return m


def engine(model, eos=(1,)):
    return HFGenerationEngine(model, eos_token_ids=list(eos), pad_token_id=0)


def run(eng, spec, prompts=PROMPTS, n=1):
    reqs = [GenerationRequest(f"r{i}-{k}", p, spec) for i, p in enumerate(prompts) for k in range(n)]
    return eng.generate(reqs)


def reference_logprobs(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    t = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / t, dim=-1)
    return [float(logp[len(prompt) - 1 + j, tok]) for j, tok in enumerate(response)]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_match_a_plain_forward_pass(model, temperature):
    """Batched, left-padded, KV-cached decoding returns the actor's log-probs of the same tokens."""
    eng = engine(model, eos=(1,))
    results = run(eng, SamplingSpec(max_new_tokens=6, temperature=temperature, seed=3), n=2)
    assert any(len(r.token_ids) > 1 for r in results)
    for r in results:
        prompt = PROMPTS[int(r.request_id[1])]
        ref = reference_logprobs(model, prompt, r.token_ids, temperature)
        assert len(r.log_probs) == len(r.token_ids)
        assert max(abs(a - b) for a, b in zip(r.log_probs, ref)) < 1e-4


def test_greedy_is_argmax_and_deterministic(model):
    eng = engine(model, eos=())
    a = run(eng, SamplingSpec(max_new_tokens=5, temperature=0.0))
    b = run(eng, SamplingSpec(max_new_tokens=5, temperature=0.0))
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    for r, prompt in zip(a, PROMPTS):
        ids = list(prompt)
        for tok in r.token_ids:
            with torch.no_grad():
                nxt = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            assert tok == nxt
            ids.append(tok)


def test_top_k_1_equals_greedy_even_when_hot(model):
    eng = engine(model, eos=())
    greedy = run(eng, SamplingSpec(max_new_tokens=5, temperature=0.0))
    topk1 = run(eng, SamplingSpec(max_new_tokens=5, temperature=5.0, top_k=1, seed=1))
    assert [r.token_ids for r in greedy] == [r.token_ids for r in topk1]


def test_tiny_top_p_equals_greedy(model):
    eng = engine(model, eos=())
    greedy = run(eng, SamplingSpec(max_new_tokens=5, temperature=0.0))
    nucleus = run(eng, SamplingSpec(max_new_tokens=5, temperature=1.0, top_p=1e-6, seed=1))
    assert [r.token_ids for r in greedy] == [r.token_ids for r in nucleus]


def test_temperature_raises_diversity(model):
    eng = engine(model, eos=())
    cold = run(eng, SamplingSpec(max_new_tokens=4, temperature=0.2, seed=None), prompts=[PROMPTS[0]], n=48)
    hot = run(eng, SamplingSpec(max_new_tokens=4, temperature=3.0, seed=None), prompts=[PROMPTS[0]], n=48)
    distinct = lambda rs: len({tuple(r.token_ids) for r in rs})  # noqa: E731
    assert distinct(hot) > distinct(cold)


def test_top_k_limits_the_first_token_to_k_choices(model):
    eng = engine(model, eos=())
    rs = run(eng, SamplingSpec(max_new_tokens=1, temperature=3.0, top_k=2), prompts=[PROMPTS[0]], n=64)
    assert len({r.token_ids[0] for r in rs}) <= 2
    free = run(eng, SamplingSpec(max_new_tokens=1, temperature=3.0), prompts=[PROMPTS[0]], n=64)
    assert len({r.token_ids[0] for r in free}) > 2


def test_max_new_tokens_and_eos(model):
    greedy_first = run(engine(model, eos=()), SamplingSpec(max_new_tokens=1, temperature=0.0))
    # Make each prompt's greedy first token an EOS: generation stops after it...
    eos = sorted({r.token_ids[0] for r in greedy_first})
    stopped = run(engine(model, eos=eos), SamplingSpec(max_new_tokens=7, temperature=0.0))
    assert all(len(r.token_ids) == 1 and r.finish_reason == "stop" for r in stopped)
    # ...unless ignore_eos, which runs to the budget.
    ignored = run(engine(model, eos=eos), SamplingSpec(max_new_tokens=7, temperature=0.0, ignore_eos=True))
    assert all(len(r.token_ids) == 7 and r.finish_reason == "length" for r in ignored)


def test_seed_reproduces_samples(model):
    eng = engine(model, eos=())
    a = run(eng, SamplingSpec(max_new_tokens=5, temperature=1.0, seed=42))
    b = run(eng, SamplingSpec(max_new_tokens=5, temperature=1.0, seed=42))
    c = run(eng, SamplingSpec(max_new_tokens=5, temperature=1.0, seed=43))
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert [r.token_ids for r in a] != [r.token_ids for r in c]


def test_abort_stops_a_request_early(model):
    eng = engine(model, eos=())
    req = GenerationRequest("x", PROMPTS[0], SamplingSpec(max_new_tokens=20, temperature=1.0))
    req.abort.set()
    (res,) = eng.generate([req])
    assert res.stop_reason == "aborted" and len(res.token_ids) == 1


def test_weight_update_changes_outputs_and_rejects_unknown_names(model):
    eng = engine(model, eos=())
    before = run(eng, SamplingSpec(max_new_tokens=3, temperature=0.0))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        n = eng.load_weights((k, torch.randn_like(v)) for k, v in saved.items())
        assert n == len(saved)
        after = run(eng, SamplingSpec(max_new_tokens=3, temperature=0.0))
        assert [r.token_ids for r in after] != [r.token_ids for r in before]
        with pytest.raises(KeyError, match="no_such"):
            eng.load_weights([("no_such.weight", torch.zeros(1))])
        with pytest.raises(ValueError, match="shape"):
            eng.load_weights([("model.norm.weight", torch.zeros(3))])
    finally:
        eng.load_weights(saved.items())


def test_filter_logits_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    out = _filter_logits(logits, torch.tensor([-1]), torch.tensor([0.7]))
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]
    out = _filter_logits(logits, torch.tensor([3]), torch.tensor([1.0]))
    assert torch.isfinite(out).tolist() == [[True, True, True, False]]


@pytest.mark.parametrize("bad", [dict(max_new_tokens=0), dict(max_new_tokens=4, top_p=0.0), dict(max_new_tokens=4, top_k=0)])
def test_bad_sampling_parameters_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingSpec(**bad)


def test_each_request_is_handed_over_the_moment_it_finishes(model):
    """``on_finish`` delivers a short response while the batch's long one is still decoding."""
    eng = engine(model)
    forwards = {"n": 0}
    inner = eng.model.forward

    def counting_forward(*args, **kwargs):
        forwards["n"] += 1
        return inner(*args, **kwargs)

    eng.model.forward = counting_forward
    seen = []
    short = GenerationRequest("short", PROMPTS[0], SamplingSpec(max_new_tokens=2, ignore_eos=True))
    long = GenerationRequest("long", PROMPTS[1], SamplingSpec(max_new_tokens=20, ignore_eos=True))
    try:
        results = eng.generate([short, long], on_finish=lambda row, r: seen.append((row, r, forwards["n"])))
    finally:
        eng.model.forward = inner
    assert [(row, r.request_id) for row, r, _ in seen] == [(0, "short"), (1, "long")]
    assert seen[0][2] == 2 and seen[1][2] == 20  # delivered after its own last token, not the batch's
    assert seen[0][1].token_ids == results[0].token_ids and len(results[1].token_ids) == 20


def test_requests_admitted_mid_batch_join_it_with_exact_numerics(model):
    """Continuous batching: requests that arrive while a batch decodes are prefilled, join the
    running batch (caches of different lengths merged), and decode exactly as they would alone."""
    eng = engine(model, eos=())
    first = [GenerationRequest("a", PROMPTS[2], SamplingSpec(max_new_tokens=24, ignore_eos=True, seed=1))]
    late = [
        GenerationRequest("b", PROMPTS[1], SamplingSpec(max_new_tokens=6, ignore_eos=True, seed=2)),
        GenerationRequest("c", PROMPTS[0] + [5, 5, 5, 5, 5, 5], SamplingSpec(max_new_tokens=9, seed=3)),
    ]
    polls, finished = [], []

    def admit(active: int):
        polls.append(active)
        if len(polls) == 4:
            return list(late)  # arrive while "a" is on its 4th token
        if len(polls) == 8:
            return [GenerationRequest("d", PROMPTS[0], SamplingSpec(max_new_tokens=3, ignore_eos=True, seed=4))]
        return []

    results = eng.generate(first, on_finish=lambda row, r: finished.append((r.request_id, len(polls))), admit=admit)
    assert [r.request_id for r in results] == ["a", "b", "c", "d"]
    assert [len(r.token_ids) for r in results] == [24, 6, len(results[2].token_ids), 3]
    prompts = {"a": PROMPTS[2], "b": PROMPTS[1], "c": PROMPTS[0] + [5] * 6, "d": PROMPTS[0]}
    for r in results:
        ref = reference_logprobs(model, prompts[r.request_id], r.token_ids, 1.0)
        assert max(abs(x - y) for x, y in zip(r.log_probs, ref)) < 1e-4, r.request_id
    # Each finished while "a" was still decoding; "a" itself was never held up.
    done = dict(finished)
    # (token 1 of "a" comes from its prefill, tokens 2..24 from 23 decode steps, one poll each)
    assert done["b"] < done["a"] and done["d"] < done["a"] and done["a"] == 23
    # The same seeds give the same tokens when run alone (admission changes nothing numerically).
    alone = eng.generate([GenerationRequest("b", PROMPTS[1], SamplingSpec(max_new_tokens=6, ignore_eos=True, seed=2))])
    assert alone[0].token_ids == results[1].token_ids


def test_cache_shrinks_to_the_live_rows_when_a_long_row_leaves(model):
    """A request admitted into a running batch is left-padded to the batch's width; once the rows
    that set that width finish, decode steps attend over the live row's own tokens only (as vLLM's
    paged cache does), with unchanged numerics."""
    eng = engine(model, eos=())
    widths = []
    inner = eng.model.forward

    def recording_forward(*args, **kwargs):
        widths.append(kwargs["attention_mask"].shape[1])
        return inner(*args, **kwargs)

    long_prompt = PROMPTS[2] + [5] * 14  # 20 tokens
    first = [GenerationRequest("long", long_prompt, SamplingSpec(max_new_tokens=4, ignore_eos=True, seed=1))]
    polls = []

    def admit(active: int):
        polls.append(active)
        if len(polls) == 2:  # arrives while "long" decodes its 2nd token
            return [GenerationRequest("short", PROMPTS[1], SamplingSpec(max_new_tokens=12, ignore_eos=True, seed=2))]
        return []

    eng.model.forward = recording_forward
    try:
        results = eng.generate(first, admit=admit)
    finally:
        eng.model.forward = inner
    short = results[1]
    assert len(short.token_ids) == 12
    # The last decode step sees the short row's 3 prompt tokens + 11 generated ones, not the
    # 20-token prompt's width it was padded to while "long" was in the batch.
    assert widths[-1] == len(PROMPTS[1]) + 11
    assert max(widths) > len(long_prompt)
    ref = reference_logprobs(model, PROMPTS[1], short.token_ids, 1.0)
    assert max(abs(x - y) for x, y in zip(short.log_probs, ref)) < 1e-4
    again = GenerationRequest("short", PROMPTS[1], SamplingSpec(max_new_tokens=12, ignore_eos=True, seed=2))
    assert eng.generate([again])[0].token_ids == short.token_ids


def _server(seed: int, rank: int = 0):
    """The server's seeding state alone (no Ray actor, no model): what ``_sampling_spec`` reads."""
    import collections
    from types import SimpleNamespace

    from verl.cpu.rollout.server import HFRolloutServer

    server = HFRolloutServer.__new__(HFRolloutServer)
    server.config = SimpleNamespace(seed=seed, full_determinism=False, response_length=6, prompt_length=8)
    server.replica_rank, server.max_model_len = rank, 64
    server._draws = collections.Counter()
    return server


def _sample(model, server, prompts, batches):
    """Each prompt's samples when the requests reach the engine in ``batches`` (lists of indices into prompts)."""
    specs = [server._sampling_spec(p, {"temperature": 1.0}) for p in prompts]  # arrival order: as listed
    eng, out = engine(model, eos=()), {}
    for batch in batches:
        results = eng.generate([GenerationRequest(f"r{i}", prompts[i], specs[i]) for i in batch])
        out.update({int(r.request_id[1:]): r.token_ids for r in results})
    by_prompt: dict = {}
    for i, p in enumerate(prompts):
        by_prompt.setdefault(tuple(p), []).append(out[i])
    return {p: sorted(v) for p, v in by_prompt.items()}


def test_server_seeds_each_request_so_batch_mates_do_not_matter(model):
    """rollout.seed reaches every request: the same seed samples the same responses per prompt whichever
    requests share an engine batch and in which order a prompt's samples arrive; another seed (or replica)
    samples others. Without a per-request seed every row drew from one global generator, so a sample
    depended on its batch-mates (the agent loop's concurrency decides them)."""
    prompts = [PROMPTS[i % 3] for i in range(9)]  # three samples of each prompt, interleaved
    one_batch = _sample(model, _server(5), prompts, [list(range(9))])
    reordered = [prompts[i] for i in (8, 2, 5, 0, 7, 1, 4, 3, 6)]
    split = _sample(model, _server(5), reordered, [[0, 1], [2, 3, 4, 5], [6, 7, 8]])
    assert split == one_batch
    # a prompt's samples are not copies of one draw: each has its own seed
    server = _server(5)
    assert len({server._sampling_spec(PROMPTS[0], {}).seed for _ in range(16)}) == 16
    assert any(len(set(map(tuple, v))) > 1 for v in one_batch.values())
    assert _sample(model, _server(6), prompts, [list(range(9))]) != one_batch
    assert _sample(model, _server(5, rank=1), prompts, [list(range(9))]) != one_batch
