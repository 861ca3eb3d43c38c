"""Worker-side adapter of the ``hf`` rollout (upstream's ``BaseRollout`` interface).

It runs inside each training worker (``ActorRolloutRefWorker``) in colocated modes, and in
the rollout pool's ``CheckpointEngineWorker`` in ``separate_async``. After every update it is
handed the actor's full weights as ``(name, tensor)`` pairs -- a generator from the training
worker, an async generator from a checkpoint engine's ``receive_weights`` -- copies them to CPU
and sends them, in one call, to the HF server of its replica.
"""

from __future__ import annotations

import os

import ray
import torch

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.utils import ensure_async_iterator


class HFServerAdapter(BaseRollout):
    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank if replica_rank == -1 else replica_rank
        self._server = None

    def _server_handle(self):
        if self._server is None:
            from verl.cpu.rollout.replica import server_actor_name

            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: int = None, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise ValueError(f"rollout.name=hf supports wire_format='named_tensors' only, got {wire_format!r}")
        named = []
        async for name, tensor in ensure_async_iterator(weights):
            if hasattr(tensor, "full_tensor"):  # DTensor from FSDP2
                tensor = tensor.full_tensor()
            named.append((name, tensor.detach().to("cpu", copy=True)))
        server = self._server_handle()
        await server.update_weights.remote(named)
        if global_steps is not None:
            await server.set_global_steps.remote(global_steps)
