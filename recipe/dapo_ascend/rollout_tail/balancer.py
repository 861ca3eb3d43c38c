"""Route each request to the rollout replica with the fewest outstanding tokens.

Upstream's default router (``GlobalRequestLoadBalancer``) sends a request to the replica with
the fewest requests in flight. Requests are not equal: a resumed response has a small budget
left, a fresh one a full ``response_length``; a replica holding four nearly finished requests
is less loaded than one holding a single fresh long one. Here a request costs its remaining
decode budget plus ``prefill_weight`` times its prompt length, and a replica's load is the sum
over its requests in flight. Ties fall back to request count, then to a random pick.

Installed through upstream's ``actor_rollout_ref.rollout.router_config_path`` (a YAML with
``router_class``); the recipe's trainer writes that YAML when
``rollout_tail.balance=outstanding_tokens`` and the user has not set a router of their own.
Stickiness is kept for multi-turn requests already placed (same ``request_id`` while in flight)
but not across an abort: a resumed request re-prefills anyway (aborts reset the prefix cache).

Seam ``recipe_balancer``: it reads upstream's server table; it goes when ``GlobalRequestLoadBalancer`` exposes
public ``servers()``/``inflight()`` accessors.
"""

from __future__ import annotations

import random
from typing import Any, Optional

from verl.workers.rollout.router import GlobalRequestLoadBalancer

ROUTER_CLASS = "recipe.dapo_ascend.rollout_tail.balancer.OutstandingTokensBalancer"


def request_cost(prompt_ids, sampling_params: Optional[dict], default_max_tokens: int, prefill_weight: float) -> float:
    """Outstanding tokens of one request: decode budget + weighted prompt (prefill) tokens."""
    params = sampling_params or {}
    budget = params.get("max_tokens", params.get("max_new_tokens"))
    budget = int(budget) if budget is not None else int(default_max_tokens)
    return float(budget) + prefill_weight * float(len(prompt_ids or ()))


class OutstandingTokensBalancer(GlobalRequestLoadBalancer):
    def __init__(self, servers: dict[str, Any], router_config: Optional[dict] = None, **kwargs):
        super().__init__(servers, **kwargs)
        cfg = dict(router_config or {})
        self._default_max_tokens = int(cfg.get("default_max_tokens", 1024))
        self._prefill_weight = float(cfg.get("prefill_weight", 0.1))
        self._outstanding: dict[str, float] = {sid: 0.0 for sid in servers}
        # request_id -> [(server_id, cost), ...] (a stack: one id may be in flight more than once)
        self._costs: dict[str, list[tuple[str, float]]] = {}

    def require_acquire_fields(self) -> list[str]:
        return ["prompt_ids", "sampling_params"]

    def require_release_fields(self) -> list[str]:
        return ["request_id"]

    def acquire_server(self, request_id: str, prompt_ids=None, sampling_params=None, **_):
        if not self._servers:
            raise RuntimeError("No available servers in load balancer")
        cost = request_cost(prompt_ids, sampling_params, self._default_max_tokens, self._prefill_weight)
        placed = self._costs.get(request_id)
        if placed and placed[-1][0] in self._servers:
            server_id = placed[-1][0]  # a multi-turn request still in flight stays put
        else:
            loads = {sid: (self._outstanding.get(sid, 0.0), self._inflight_requests.get(sid, 0)) for sid in self._servers}
            best = min(loads.values())
            server_id = random.choice([sid for sid, load in loads.items() if load == best])
        self._costs.setdefault(request_id, []).append((server_id, cost))
        self._outstanding[server_id] = self._outstanding.get(server_id, 0.0) + cost
        self._inflight_requests[server_id] = self._inflight_requests.get(server_id, 0) + 1
        return server_id, self._servers[server_id]

    def release_server(self, server_id: str, request_id: Optional[str] = None) -> None:
        super().release_server(server_id, request_id)
        stack = self._costs.get(request_id) if request_id is not None else None
        if not stack:
            return
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == server_id:
                _, cost = stack.pop(i)
                if server_id in self._outstanding:
                    self._outstanding[server_id] = max(0.0, self._outstanding[server_id] - cost)
                break
        if not stack:
            del self._costs[request_id]

    def add_servers(self, servers: dict[str, Any]) -> None:
        super().add_servers(servers)
        for sid in servers:
            self._outstanding[sid] = 0.0

    def remove_servers(self, server_ids: list[str]) -> None:
        super().remove_servers(server_ids)
        for sid in server_ids:
            self._outstanding.pop(sid, None)

    def get_status(self) -> dict:
        status = super().get_status()
        status["outstanding_tokens"] = dict(self._outstanding)
        return status
