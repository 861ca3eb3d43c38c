"""The LLM client the policy gives upstream's agent loops: an aborted response resumes from its tokens.

Upstream's synchronous trainer uses ``LLMServerClient``, which returns an aborted request's
partial response as if it were finished. With ``carry_over`` this client instead re-submits
it: the new request's prompt is the original prompt followed by exactly the tokens generated
so far, and its budget is what is left of the original one. The server parks the request until
``resume_generation`` (after the next weight update), so the continuation is sampled by the
next step's policy. Each response records which weight version produced which tokens::

    extra_fields["rollout_tail"] = {"spans": [[start, end, version], ...], "aborts": k}

``min_global_steps`` / ``max_global_steps`` (upstream's staleness tags) become the oldest and
newest version that contributed. Without ``carry_over`` an aborted response is returned as is,
marked ``"aborted": true``, and the sampler discards its group.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from verl.workers.rollout.llm_server import LLMServerClient

from recipe.dapo_ascend.rollout_tail.policy import TailPolicy

ABORTED = ("aborted", "abort")
# A server that answers "aborted" without tokens and without parking (rejecting gate) must not
# make the client spin.
EMPTY_ABORT_BACKOFF_S = 0.05


class TailAwareClient(LLMServerClient):
    def __init__(self, config, load_balancer_handle=None, **kwargs):
        super().__init__(config=config, load_balancer_handle=load_balancer_handle, **kwargs)
        self.carry_over = TailPolicy.from_config(config).carry_over

    def _budget(self, sampling_params: dict[str, Any]) -> int:
        for key in ("max_tokens", "max_new_tokens"):
            if sampling_params.get(key) is not None:
                return int(sampling_params[key])
        return int(self.config.actor_rollout_ref.rollout.response_length)

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs):
        prompt_ids = [int(t) for t in prompt_ids]
        budget = self._budget(sampling_params)
        params = dict(sampling_params)  # the caller reuses its dict: never change it
        tokens: list[int] = []
        logprobs: list[float] | None = []
        spans: list[list] = []
        routed = None
        aborts = preempted = 0
        while True:
            out = await super().generate(request_id, prompt_ids=prompt_ids + tokens, sampling_params=params, **kwargs)
            new = [int(t) for t in out.token_ids]
            version = out.extra_fields.get("global_steps")
            if new:
                spans.append([len(tokens), len(tokens) + len(new), version])
                if out.routed_experts is not None:
                    tail = np.asarray(out.routed_experts)[-len(new) :]
                    routed = np.asarray(out.routed_experts) if routed is None else np.concatenate([routed, tail])
            tokens.extend(new)
            if logprobs is not None and out.log_probs is not None and len(out.log_probs) == len(new):
                logprobs.extend(float(x) for x in out.log_probs)
            elif new:
                logprobs = None  # a segment without log-probs: none for the whole response
            preempted += int(out.num_preempted or 0)
            aborted = out.stop_reason in ABORTED
            if not (aborted and self.carry_over and len(tokens) < budget):
                break
            aborts += 1
            # Resume from exactly these tokens with what is left of the budget.
            params = {k: v for k, v in sampling_params.items() if k != "max_new_tokens"}
            params["max_tokens"] = budget - len(tokens)
            if not new:
                await asyncio.sleep(EMPTY_ABORT_BACKOFF_S)

        versions = [v for _, _, v in spans if v is not None]
        extra = dict(out.extra_fields)
        if versions:
            extra["min_global_steps"], extra["max_global_steps"] = min(versions), max(versions)
        else:
            extra.setdefault("min_global_steps", extra.get("global_steps"))
            extra.setdefault("max_global_steps", extra.get("global_steps"))
        extra["rollout_tail"] = {"spans": spans, "aborts": aborts, "aborted": bool(aborted)}
        stop_reason = out.stop_reason
        if aborted and len(tokens) >= budget:
            stop_reason = "completed"  # the budget ran out exactly at the abort
        return out.model_copy(
            update={
                "token_ids": tokens,
                "log_probs": logprobs if logprobs else None,
                "routed_experts": routed if routed is not None else out.routed_experts,
                "stop_reason": stop_reason,
                "num_preempted": preempted if out.num_preempted is not None else None,
                "extra_fields": extra,
            }
        )
