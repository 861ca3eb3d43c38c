"""Batched autoregressive sampling for a transformers causal LM, with per-request parameters.

Numerics follow what upstream's vLLM server returns (``logprobs_mode=processed_logprobs``):
the log-probability of each sampled token under ``log_softmax(logits / temperature)``
(plain ``log_softmax(logits)`` for greedy decoding), i.e. after temperature and before
top-k/top-p truncation. That is exactly what the actor recomputes in its forward pass, so
rollout and actor log-probs agree up to floating-point noise.

Prompts are left-padded into one batch; rows that finish (EOS, their own token budget, or
an abort) are dropped from the batch and from the KV cache, so a long straggler does not
make the finished rows keep paying for compute.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional

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
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        if not requests:
            return []
        n = len(requests)
        lengths = [len(r.prompt_ids) for r in requests]
        width = max(lengths)
        input_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(requests):
            input_ids[i, width - lengths[i] :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attention[i, width - lengths[i] :] = 1

        temperature = torch.tensor([r.sampling.temperature for r in requests], dtype=torch.float32)
        top_p = torch.tensor([r.sampling.top_p for r in requests], dtype=torch.float32)
        top_k = torch.tensor([r.sampling.top_k for r in requests], dtype=torch.long)
        budget = torch.tensor([r.sampling.max_new_tokens for r in requests], dtype=torch.long)
        use_eos = torch.tensor([not r.sampling.ignore_eos for r in requests])
        generators = [self._generator(r.sampling.seed) for r in requests]
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long)

        out_tokens: list[list[int]] = [[] for _ in range(n)]
        out_logprobs: list[list[float]] = [[] for _ in range(n)]
        finish: list[Optional[str]] = [None] * n
        active = torch.arange(n)  # original row index of each live batch row

        position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
        past = None
        step_ids = input_ids
        step_pos = position_ids
        for step in range(int(budget.max())):
            out = self.model(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=step_pos,
                past_key_values=past,
                use_cache=True,
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            t = temperature[active]
            greedy = t <= 0
            scaled = logits / torch.where(greedy, torch.ones_like(t), t).unsqueeze(-1)
            logprobs_all = torch.log_softmax(scaled, dim=-1)
            filtered = _filter_logits(scaled, top_k[active], top_p[active])
            probs = torch.softmax(filtered, dim=-1)
            next_tokens = torch.empty(len(active), dtype=torch.long)
            for row, orig in enumerate(active.tolist()):
                if greedy[row]:
                    next_tokens[row] = torch.argmax(logits[row])
                else:
                    next_tokens[row] = torch.multinomial(probs[row], 1, generator=generators[orig])[0]
            token_logprobs = logprobs_all.gather(-1, next_tokens.unsqueeze(-1)).squeeze(-1)

            keep = []
            for row, orig in enumerate(active.tolist()):
                tok = int(next_tokens[row])
                out_tokens[orig].append(tok)
                out_logprobs[orig].append(float(token_logprobs[row]))
                if bool(use_eos[orig]) and bool((eos == tok).any()):
                    finish[orig] = "stop"
                elif len(out_tokens[orig]) >= int(budget[orig]):
                    finish[orig] = "length"
                elif requests[orig].abort.is_set():
                    finish[orig] = "abort"
                else:
                    keep.append(row)
            if not keep:
                break
            if len(keep) < len(active):
                idx = torch.tensor(keep, dtype=torch.long)
                past.batch_select_indices(idx)
                attention = attention[idx]
                next_tokens = next_tokens[idx]
                step_pos = step_pos[idx]
                active = active[idx]
            attention = torch.cat([attention, torch.ones((len(active), 1), dtype=attention.dtype)], dim=-1)
            step_pos = step_pos[:, -1:] + 1
            step_ids = next_tokens.unsqueeze(-1)

        return [
            GenerationResult(
                request_id=r.request_id,
                token_ids=out_tokens[i],
                log_probs=out_logprobs[i],
                stop_reason="aborted" if finish[i] == "abort" else "completed",
                finish_reason=finish[i] or "length",
            )
            for i, r in enumerate(requests)
        ]

    @staticmethod
    def _generator(seed: Optional[int]) -> Optional[torch.Generator]:
        if seed is None:
            return None
        g = torch.Generator()
        g.manual_seed(int(seed))
        return g
