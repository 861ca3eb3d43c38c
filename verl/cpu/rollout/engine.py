"""Batched autoregressive sampling for a transformers causal LM, with per-request parameters.

Numerics follow what upstream's vLLM server returns (``logprobs_mode=processed_logprobs``):
the log-probability of each sampled token under ``log_softmax(logits / temperature)``
(plain ``log_softmax(logits)`` for greedy decoding), i.e. after temperature and before
top-k/top-p truncation. That is exactly what the actor recomputes in its forward pass, so
rollout and actor log-probs agree up to floating-point noise.

Scheduling follows vLLM's in the two ways a rollout's long tail depends on:

- continuous batching: requests that arrive while a batch is decoding (``admit``) are prefilled
  and join it at the next step, instead of queueing behind its longest response; rows that
  finish (EOS, their own token budget, or an abort) leave the batch and the KV cache at once;
- streaming results: ``on_finish`` hands each row's result over the moment it finishes.

Prompts are left-padded; rows of different lengths share one KV cache, the shorter ones
left-padded and masked out.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Optional

import torch


@dataclasses.dataclass
class SamplingSpec:
    """One request's sampling parameters, as upstream's agent loop sends them."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    ignore_eos: bool = False
    seed: Optional[int] = None

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")


@dataclasses.dataclass
class GenerationRequest:
    request_id: str
    prompt_ids: list[int]
    sampling: SamplingSpec
    abort: threading.Event = dataclasses.field(default_factory=threading.Event)


@dataclasses.dataclass
class GenerationResult:
    request_id: str
    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str  # "completed" (EOS or budget) or "aborted"
    finish_reason: str  # "stop" (EOS), "length" (budget), "abort"


def _filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside each row's top-k / nucleus (top-p) set with -inf."""
    vocab = logits.shape[-1]
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device).expand_as(sorted_logits)
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    remove = ranks >= k.unsqueeze(-1)
    probs = torch.softmax(sorted_logits.masked_fill(remove, float("-inf")), dim=-1)
    # Keep the smallest prefix whose mass reaches top_p (the token crossing the threshold stays).
    mass_before = torch.cumsum(probs, dim=-1) - probs
    remove |= mass_before >= top_p.unsqueeze(-1)
    remove[:, 0] = False
    mask = torch.zeros_like(remove).scatter(-1, sorted_idx, remove)
    return logits.masked_fill(mask, float("-inf"))


class HFGenerationEngine:
    """Samples continuations for a batch of requests from a causal LM held on the CPU."""

    def __init__(self, model: torch.nn.Module, eos_token_ids: list[int], pad_token_id: int):
        self.model = model.eval()
        self.eos_token_ids = sorted(set(eos_token_ids))
        self.pad_token_id = pad_token_id

    @torch.no_grad()
    def load_weights(self, named_tensors) -> int:
        """Copy ``(name, tensor)`` pairs into the model; returns how many were loaded.

        Unknown names are an error (a silent mismatch would sample from stale weights).
        """
        # state_dict (not named_parameters) so tied weights answer to both of their names.
        params = self.model.state_dict(keep_vars=True)
        count = 0
        for name, tensor in named_tensors:
            target = params.get(name)
            if target is None:
                raise KeyError(f"rollout weight update: model has no parameter named {name!r}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"rollout weight update: {name!r} has shape {tuple(tensor.shape)}, model expects {tuple(target.shape)}"
                )
            target.data.copy_(tensor.to(dtype=target.dtype))
            count += 1
        return count

    @torch.no_grad()
    def generate(
        self,
        requests: list[GenerationRequest],
        on_finish: Optional[Callable[[int, GenerationResult], None]] = None,
        admit: Optional[Callable[[int], list[GenerationRequest]]] = None,
    ) -> list[GenerationResult]:
        """Sample every request; returns one result per request, in admission order.

        ``on_finish(row, result)`` is called as each row finishes (``row`` indexes the admission
        order: ``requests`` first, then what ``admit`` returned). ``admit(active_rows)`` is polled
        before every decode step for requests that arrived meanwhile: they are prefilled and join
        the running batch at once (continuous batching), instead of waiting for its longest row.
        """
        run = _Run(requests=[], out_tokens=[], out_logprobs=[], finish=[], generators=[], on_finish=on_finish)
        state: Optional[_BatchState] = None
        queue = list(requests)
        while True:
            if admit is not None:
                queue += admit(len(state.active) if state is not None else 0)
            if queue:
                fresh = self._prefill(run, queue)
                queue = []
                state = fresh if state is None else state.merge(fresh)
            if state is None:
                break
            out = self.model(
                input_ids=state.step_ids.unsqueeze(-1),
                attention_mask=state.attention,
                position_ids=state.step_pos,
                past_key_values=state.past,
                use_cache=True,
            )
            next_tokens, keep = self._sample(run, out.logits[:, -1, :].float(), state.active)
            state = state.advance(next_tokens, keep)
        return [self._result(r, run.out_tokens[i], run.out_logprobs[i], run.finish[i]) for i, r in enumerate(run.requests)]

    def _prefill(self, run: "_Run", requests: list[GenerationRequest]) -> Optional["_BatchState"]:
        """Register ``requests``, run their prompts (left-padded) and sample each one's first token."""
        first = len(run.requests)
        for r in requests:
            run.requests.append(r)
            run.out_tokens.append([])
            run.out_logprobs.append([])
            run.finish.append(None)
            run.generators.append(self._generator(r.sampling.seed))
        rows = torch.arange(first, len(run.requests))
        lengths = [len(r.prompt_ids) for r in requests]
        width = max(lengths)
        input_ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):
            input_ids[i, width - lengths[i] :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attention[i, width - lengths[i] :] = 1
        position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids, use_cache=True)
        next_tokens, keep = self._sample(run, out.logits[:, -1, :].float(), rows)
        state = _BatchState(out.past_key_values, attention, position_ids[:, -1:], next_tokens, rows)
        return state.advance(next_tokens, keep)

    def _sample(self, run: "_Run", logits: torch.Tensor, active: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """Sample one token per live row; record it; returns the tokens and the rows that go on."""
        reqs = [run.requests[i] for i in active.tolist()]
        t = torch.tensor([r.sampling.temperature for r in reqs], dtype=torch.float32)
        top_p = torch.tensor([r.sampling.top_p for r in reqs], dtype=torch.float32)
        top_k = torch.tensor([r.sampling.top_k for r in reqs], dtype=torch.long)
        greedy = t <= 0
        scaled = logits / torch.where(greedy, torch.ones_like(t), t).unsqueeze(-1)
        logprobs_all = torch.log_softmax(scaled, dim=-1)
        probs = torch.softmax(_filter_logits(scaled, top_k, top_p), dim=-1)
        next_tokens = torch.empty(len(reqs), dtype=torch.long)
        for row, orig in enumerate(active.tolist()):
            if greedy[row]:
                next_tokens[row] = torch.argmax(logits[row])
            else:
                next_tokens[row] = torch.multinomial(probs[row], 1, generator=run.generators[orig])[0]
        token_logprobs = logprobs_all.gather(-1, next_tokens.unsqueeze(-1)).squeeze(-1)

        eos = self.eos_token_ids
        keep = []
        for row, orig in enumerate(active.tolist()):
            request, tok = run.requests[orig], int(next_tokens[row])
            run.out_tokens[orig].append(tok)
            run.out_logprobs[orig].append(float(token_logprobs[row]))
            if not request.sampling.ignore_eos and tok in eos:
                run.finish[orig] = "stop"
            elif len(run.out_tokens[orig]) >= request.sampling.max_new_tokens:
                run.finish[orig] = "length"
            elif request.abort.is_set():
                run.finish[orig] = "abort"
            else:
                keep.append(row)
                continue
            if run.on_finish is not None:
                run.on_finish(orig, self._result(request, run.out_tokens[orig], run.out_logprobs[orig], run.finish[orig]))
        return next_tokens, keep

    @staticmethod
    def _result(request: GenerationRequest, tokens: list[int], logprobs: list[float], finish: Optional[str]):
        return GenerationResult(
            request_id=request.request_id,
            token_ids=list(tokens),
            log_probs=list(logprobs),
            stop_reason="aborted" if finish == "abort" else "completed",
            finish_reason=finish or "length",
        )

    @staticmethod
    def _generator(seed: Optional[int]) -> Optional[torch.Generator]:
        if seed is None:
            return None
        g = torch.Generator()
        g.manual_seed(int(seed))
        return g


@dataclasses.dataclass
class _Run:
    """Everything one ``generate`` call accumulates, per request in admission order."""

    requests: list
    out_tokens: list
    out_logprobs: list
    finish: list
    generators: list
    on_finish: Optional[Callable]


@dataclasses.dataclass
class _BatchState:
    """The live rows of a batch: KV cache of all tokens but the last sampled one (``step_ids``),
    attention over cache + that token, its position, and each row's index in the run."""

    past: object
    attention: torch.Tensor
    step_pos: torch.Tensor
    step_ids: torch.Tensor
    active: torch.Tensor

    def advance(self, next_tokens: torch.Tensor, keep: list[int]) -> Optional["_BatchState"]:
        """Drop finished rows; the sampled tokens become the next step's input."""
        if not keep:
            return None
        attention, step_pos, active = self.attention, self.step_pos, self.active
        if len(keep) < len(active):
            idx = torch.tensor(keep, dtype=torch.long)
            self.past.batch_select_indices(idx)
            attention, step_pos, active, next_tokens = attention[idx], step_pos[idx], active[idx], next_tokens[idx]
            attention = _trim_left(self.past, attention)
        attention = torch.cat([attention, torch.ones((len(active), 1), dtype=attention.dtype)], dim=-1)
        return _BatchState(self.past, attention, step_pos[:, -1:] + 1, next_tokens, active)

    def merge(self, other: Optional["_BatchState"]) -> "_BatchState":
        """Join ``other``'s rows to this batch: the shorter cache is left-padded (masked out)."""
        if other is None:
            return self
        mine, theirs = self.attention.shape[1], other.attention.shape[1]
        width = max(mine, theirs)
        for a, b in zip(self.past.layers, other.past.layers, strict=True):
            a.keys = torch.cat([_left_pad(a.keys, width - mine), _left_pad(b.keys, width - theirs)], dim=0)
            a.values = torch.cat([_left_pad(a.values, width - mine), _left_pad(b.values, width - theirs)], dim=0)
        attention = torch.cat(
            [
                torch.nn.functional.pad(self.attention, (width - mine, 0)),
                torch.nn.functional.pad(other.attention, (width - theirs, 0)),
            ],
            dim=0,
        )
        return _BatchState(
            self.past,
            attention,
            torch.cat([self.step_pos, other.step_pos], dim=0),
            torch.cat([self.step_ids, other.step_ids], dim=0),
            torch.cat([self.active, other.active], dim=0),
        )


def _trim_left(past, attention: torch.Tensor) -> torch.Tensor:
    """Drop the cache positions masked out in every remaining row; returns the trimmed mask.

    A merged batch left-pads its shorter rows to the longest; once the long rows leave, every
    step would still attend over their width. vLLM's paged cache holds only each request's own
    tokens, so a decode step's cost follows the live rows' lengths: trimming the columns no live
    row attends to keeps that. In separate_async, where each weight sync's resumed requests rejoin a
    running batch, a decode step took 28.7 ms untrimmed against 20.0 ms in sync on the same workload
    (docs/ascend_tutorial/async_training.md). Masked positions weigh exactly zero in attention and
    positions are explicit, so the numerics do not change.

    Seam ``cpu_hf_kv_cache_rebind`` (with :meth:`_BatchState.merge`): transformers has no public left crop or
    batch concatenation of its cache, so each layer's keys/values are rebound. It relies on ``DynamicLayer``
    keeping no other length state (``update`` concatenates along the sequence,
    ``get_seq_length``/``get_mask_sizes`` read ``keys.shape``; a sliding-window layer's ``cumulative_length``
    would go stale). Goes when transformers' cache offers both.
    """
    live = attention.any(dim=0).nonzero()
    lead = int(live[0]) if len(live) else 0
    if lead == 0:
        return attention
    for layer in past.layers:
        layer.keys = layer.keys[:, :, lead:, :]
        layer.values = layer.values[:, :, lead:, :]
    return attention[:, lead:]


def _left_pad(kv: torch.Tensor, n: int) -> torch.Tensor:
    """Pad a ``[batch, heads, seq, dim]`` cache tensor with ``n`` zero positions at the front."""
    return torch.nn.functional.pad(kv, (0, 0, n, 0)) if n > 0 else kv
