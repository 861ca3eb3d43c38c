"""With one rollout server, the agent loops send every request straight to it.

Upstream's ``LLMServerClient`` asks a load-balancer actor for a server before each request
and tells it when the request is done: two Ray calls per sample, which choose among one
server when a run has one. On the 2-core demo machine they were a tenth of the agent loop's
time, and the balancer a process of its own competing for the same cores.

``SoleServerClient`` is the same client with the choice made once, by the trainer, which
knows the servers it built. The trainer uses it only when there is exactly one server, no
router of the user's (``rollout.router_config_path``) and the long-tail policy, which routes
by outstanding tokens, is off; otherwise upstream's client is used unchanged.

The async trainer modes use upstream's partial-rollout client (``FullyAsyncLLMServerClient``: a
request aborted by a weight update is resumed on the new weights), which asks the balancer the
same way on every attempt; ``SoleFullyAsyncServerClient`` is that client with the same choice made
once. In ``separate_async`` the one server is the rollout pool's, and only while upstream never
lends the trainer's own replicas to the balancer between steps (``hybrid_rollout.enable_switch``
off). From the first step on the balancer then holds that one server, so routing is unchanged; the
warm-up prompts submitted before it, which upstream's balancer would share with the trainer's
replicas and abort there at step 1, go to the pool's server from the start.
"""

from __future__ import annotations

from typing import Any, Optional

from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient


class _SoleServer:
    """The two balancer calls of upstream's client, answered with the one server it was given."""

    def __init__(self, config, load_balancer_handle=None, server: Optional[tuple[str, Any]] = None, **kwargs):
        if server is None:
            raise ValueError(f"{type(self).__name__} needs server=(address, handle) of the one rollout server")
        super().__init__(config=config, load_balancer_handle=load_balancer_handle, **kwargs)
        self._sole = tuple(server)

    async def _acquire_server(self, request_id: str, **extra) -> tuple[str, Any]:
        return self._sole

    def _release_server(self, server_id: str, request_id: str | None = None) -> None:
        return None


class SoleServerClient(_SoleServer, LLMServerClient):
    """Upstream's client (sync mode) without the balancer.

    Seam ``recipe_sole_server_client``: with one rollout server upstream's client still asks the load-balancer
    actor for it and releases it, two Ray calls per sample (a tenth of the agent loop's time on 2 CPU cores).
    Chosen by ``DAPOAscendHooks.get_llm_client`` for exactly one server, no ``rollout.router_config_path`` and
    the tail policy off (sync), or one server in the mode's pool (async; in separate_async,
    ``hybrid_rollout.enable_switch`` off). Goes when upstream's client routes a single server without the
    balancer.
    """


class SoleFullyAsyncServerClient(_SoleServer, FullyAsyncLLMServerClient):
    """Upstream's partial-rollout client (async modes) without the balancer; resumes as upstream's does."""


def sole_server(manager, config) -> Optional[tuple[str, Any]]:
    """``(address, handle)`` when the run has exactly one rollout server and no router of its own."""
    from omegaconf import OmegaConf

    if OmegaConf.select(config, "actor_rollout_ref.rollout.router_config_path", default=None):
        return None
    addresses = list(getattr(manager, "server_addresses", None) or [])
    handles = list(getattr(manager, "server_handles", None) or [])
    if len(addresses) != 1 or len(handles) != 1:
        return None
    return addresses[0], handles[0]
