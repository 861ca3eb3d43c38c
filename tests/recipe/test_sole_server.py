"""With one rollout server the agent loops' client skips the load balancer; otherwise upstream's."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

from recipe.dapo_ascend.sole_server import SoleServerClient, sole_server


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


def test_client_returns_the_server_without_a_balancer():
    server = ("10.0.0.1:8000", object())
    client = SoleServerClient(config=_config(), load_balancer_handle=None, server=server)
    assert asyncio.run(client._acquire_server("req-1", prompt_ids=[1, 2])) == server
    assert client._release_server(server[0], request_id="req-1") is None  # nothing to tell anyone


def test_client_without_a_server_says_what_it_needs():
    with pytest.raises(ValueError, match=r"server=\(address, handle\)"):
        SoleServerClient(config=_config(), load_balancer_handle=None)
