"""A response aborted mid-generation resumes from exactly its tokens (rollout-tail carry-over).

Real parts in one process: verl.cpu's HF rollout server, the tiny model, the recipe's
``TailAwareClient`` (upstream's ``LLMServerClient`` underneath) and the outstanding-tokens
router. Ray actor calls (``handle.method.remote(...)``) are answered by ``_Handle``, which awaits
the object's own methods, so the abort travels the same path as in a run.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from recipe.dapo_ascend.rollout_tail.balancer import OutstandingTokensBalancer
from recipe.dapo_ascend.rollout_tail.client import TailAwareClient

BUDGET = 40
ABORT_AT_FORWARD = 6  # prefill + 5 decode steps


class _Handle:
    """``handle.method.remote(*a, **k)`` -> an awaitable, as a Ray actor handle gives; records calls."""

    def __init__(self, obj, calls: list | None = None):
        self._obj, self._calls = obj, calls

    def __getattr__(self, name):
        method = getattr(self._obj, name)
        calls = self._calls

        def remote(*args, **kwargs):
            if calls is not None:
                calls.append((name, args, kwargs))
            result = method(*args, **kwargs)
            if asyncio.iscoroutine(result):
                return asyncio.ensure_future(result)
            future = asyncio.get_running_loop().create_future()
            future.set_result(result)
            return future

        return SimpleNamespace(remote=remote)


def _server(tiny_dir):
    from verl.cpu.rollout.server import HFRolloutServer

    rollout = SimpleNamespace(
        max_num_seqs=8, prompt_length=8, response_length=BUDGET, max_model_len=None, seed=0,
        full_determinism=False, ignore_eos=False, profiler=None,
    )
    model = SimpleNamespace(path=str(tiny_dir / "model"), local_path=None, generation_config=None)
    return HFRolloutServer(rollout, model, replica_rank=0)


def _config(carry_over: bool):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"name": "hf", "response_length": BUDGET, "full_determinism": False}},
            "trainer": {"v1": {"dapo_ascend": {"rollout_tail": {"enable": True, "carry_over": carry_over}}}},
        }
    )


def _abort_mid_response(server, loop):
    """Abort all requests from inside the model's forward pass number ``ABORT_AT_FORWARD``."""
    forward = server.engine.model.forward
    count = {"n": 0}

    def counting_forward(*args, **kwargs):
        count["n"] += 1
        if count["n"] == ABORT_AT_FORWARD:
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(server.abort_all_requests()))
            time.sleep(0.05)  # let the abort land before the next token
        return forward(*args, **kwargs)

    server.engine.model.forward = counting_forward


def _teacher_forced_logprobs(server, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = server.engine.model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logprobs.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "ignore_eos": True, "logprobs": True}


def test_aborted_response_resumes_from_exactly_its_tokens(tiny_dir):
    async def scenario():
        loop = asyncio.get_running_loop()
        server = _server(tiny_dir)
        server.global_steps = 0
        calls: list = []
        router = OutstandingTokensBalancer({"hf-0": _Handle(server, calls)}, {"default_max_tokens": BUDGET})
        client = TailAwareClient(_config(carry_over=True), load_balancer_handle=_Handle(router))
        _abort_mid_response(server, loop)
        prompt = [3, 5, 7, 9, 11]
        task = asyncio.ensure_future(client.generate("req-1", prompt_ids=prompt, sampling_params=dict(SAMPLING)))
        # The aborted request comes back partial and is re-submitted: it parks at the closed gate.
        for _ in range(500):
            if sum(name == "generate" for name, _, _ in calls) == 2:
                break
            await asyncio.sleep(0.01)
        generates = [kw for name, _, kw in calls if name == "generate"]
        assert len(generates) == 2, "the aborted request was not re-submitted"
        assert not task.done()
        # The next step: new weight version, gate reopened.
        await server.set_global_steps(1)
        await server.resume_generation()
        out = await asyncio.wait_for(task, timeout=60)
        return server, router, prompt, generates, out

    server, router, prompt, generates, out = asyncio.run(scenario())
    (start, cut, v0), (cut2, end, v1) = out.extra_fields["rollout_tail"]["spans"]
    assert (start, v0, v1, cut2, end) == (0, 0, 1, cut, BUDGET) and 0 < cut < BUDGET
    # The resumed request is the prompt plus exactly the tokens generated before the abort,
    # with what is left of the budget.
    assert generates[1]["prompt_ids"] == prompt + out.token_ids[:cut]
    assert generates[1]["sampling_params"]["max_tokens"] == BUDGET - cut
    assert generates[0]["sampling_params"] == SAMPLING  # the first request is upstream's, untouched
    assert len(out.token_ids) == len(out.log_probs) == BUDGET
    assert out.stop_reason == "completed"
    assert out.extra_fields["min_global_steps"] == 0 and out.extra_fields["max_global_steps"] == 1
    assert out.extra_fields["rollout_tail"]["aborts"] == 1
    # Every log-prob, before and after the cut, is the model's for exactly this sequence.
    expected = _teacher_forced_logprobs(server, prompt, out.token_ids)
    assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)
    assert router.get_status()["outstanding_tokens"] == {"hf-0": 0.0}


def test_without_carry_over_the_partial_response_is_returned_marked_aborted(tiny_dir):
    async def scenario():
        server = _server(tiny_dir)
        server.global_steps = 0
        calls: list = []
        router = OutstandingTokensBalancer({"hf-0": _Handle(server, calls)}, {"default_max_tokens": BUDGET})
        client = TailAwareClient(_config(carry_over=False), load_balancer_handle=_Handle(router))
        _abort_mid_response(server, asyncio.get_running_loop())
        out = await asyncio.wait_for(
            client.generate("req-2", prompt_ids=[4, 6, 8], sampling_params=dict(SAMPLING)), timeout=60
        )
        return calls, out

    calls, out = asyncio.run(scenario())
    assert sum(name == "generate" for name, _, _ in calls) == 1
    assert 0 < len(out.token_ids) < BUDGET and out.stop_reason == "aborted"
    assert out.extra_fields["rollout_tail"]["aborted"] is True


@pytest.mark.parametrize("budget_key", ["max_tokens", "max_new_tokens"])
def test_client_budget_comes_from_the_request_or_the_config(budget_key):
    client = TailAwareClient(_config(carry_over=True), load_balancer_handle=None)
    assert client._budget({budget_key: 12}) == 12
    assert client._budget({}) == BUDGET
