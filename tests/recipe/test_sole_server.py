"""With one rollout server the agent loops' client skips the load balancer; otherwise upstream's."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

from recipe.dapo_ascend.sole_server import SoleFullyAsyncServerClient, SoleServerClient, sole_server


class _Manager:
    def __init__(self, n):
        self.server_addresses = [f"10.0.0.{i}:800{i}" for i in range(n)]
        self.server_handles = [object() for _ in range(n)]


def _config(router=None):
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"router_config_path": router}}})


def test_one_server_is_chosen_once():
    manager = _Manager(1)
    assert sole_server(manager, _config()) == (manager.server_addresses[0], manager.server_handles[0])


@pytest.mark.parametrize("n", [0, 2])
def test_several_or_no_servers_keep_upstreams_balancer(n):
    assert sole_server(_Manager(n), _config()) is None


def test_a_router_of_the_users_keeps_upstreams_balancer():
    assert sole_server(_Manager(1), _config(router="/tmp/router.yaml")) is None


@pytest.mark.parametrize("client_cls", [SoleServerClient, SoleFullyAsyncServerClient])
def test_client_returns_the_server_without_a_balancer(client_cls):
    server = ("10.0.0.1:8000", object())
    client = client_cls(config=_config(), load_balancer_handle=None, server=server)
    assert asyncio.run(client._acquire_server("req-1", prompt_ids=[1, 2])) == server
    assert client._release_server(server[0], request_id="req-1") is None  # nothing to tell anyone


@pytest.mark.parametrize("client_cls", [SoleServerClient, SoleFullyAsyncServerClient])
def test_client_without_a_server_says_what_it_needs(client_cls):
    with pytest.raises(ValueError, match=client_cls.__name__ + r" needs server=\(address, handle\)"):
        client_cls(config=_config(), load_balancer_handle=None)


class _FakeServer:
    """A rollout server that aborts the first attempt after one token, as a weight update does."""

    def __init__(self):
        self.prompts = []
        self.generate = self

    async def remote(self, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        aborted = len(self.prompts) == 1
        token = 7 if aborted else 9
        return TokenOutput(token_ids=[token], log_probs=[-0.5], stop_reason="aborted" if aborted else "completed",
                           extra_fields={"global_steps": len(self.prompts)})


def test_partial_rollout_client_resumes_an_aborted_request_on_the_same_server():
    """Upstream's resume loop runs unchanged: the second attempt carries the tokens of the first."""
    assert issubclass(SoleFullyAsyncServerClient, FullyAsyncLLMServerClient)
    server = _FakeServer()
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"router_config_path": None, "response_length": 4,
                                                                   "name": "hf"}}})
    client = SoleFullyAsyncServerClient(config=config, load_balancer_handle=None, server=("10.0.0.1:8000", server))
    out = asyncio.run(client.generate("req-1", prompt_ids=[1, 2], sampling_params={}))
    assert server.prompts == [[1, 2], [1, 2, 7]]
    assert out.token_ids == [7, 9] and out.extra_fields["min_global_steps"] == 1
    assert out.extra_fields["max_global_steps"] == 2
