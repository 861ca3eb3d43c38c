"""Weight sync over ``torch.distributed`` gloo: upstream's checkpoint-engine protocol on CPUs.

Upstream's asynchronous trainer modes move the trainer's weights into separate rollout processes
through an engine of ``verl.checkpoint_engine.CheckpointEngineRegistry``. Every engine upstream
ships needs a device (``nccl``, HCCL on NPU; ``nixl``; ``mooncake``) or shares one process
(``naive``), so none can run where trainer and rollout are separate CPU processes. This one is
backend ``gloo``, registered when the module is imported; upstream imports it in the trainer and
in every rollout worker before the lookup when the config names it::

    actor_rollout_ref.rollout.checkpoint_engine.backend=gloo
    actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl.cpu.checkpoint_engine

One sync, as upstream's ``CheckpointEngineManager.update_weights`` drives it: ``prepare`` on every
worker (the trainer's rank 0 opens a ``TCPStore`` and reports its address), ``build_topology``
(trainer rank 0 is the group's rank 0, the other trainer ranks stay out, rollout workers follow),
``init_process_group`` (a standalone gloo group on that store: the trainer's workers already have
a default group, FSDP's, which must not be touched), then ``send_weights`` and ``receive_weights``
side by side, and ``finalize`` (group and store dropped; the next sync builds them again).

On the wire, per bucket of at most ``bucket_size`` bytes: a header (two int64: the pickled table's
length, the bucket's filled bytes; a length of 0 ends the sync), the table (each piece's name,
dtype, shape, its byte range in the tensor and in the bucket), then the filled bytes. A tensor
larger than a bucket travels in pieces and is yielded once whole. Every byte is copied as it is,
so the rollout side gets bit-identical tensors in their own dtype.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
import socket
import time
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Optional

import torch
import torch.distributed as dist

from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from verl.cpu.engine_options import GlooEngineOptions

BACKEND = "gloo"
OUTSIDE = -1  # a trainer rank that only walks the weights (producing them is collective over its group)


@dataclass(frozen=True)
class Piece:
    """Where one piece of one tensor sits: bytes ``[start, start+size)`` of the tensor, at ``at`` in the bucket."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int  # the whole tensor's
    start: int
    size: int
    at: int


def _host() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 -- no Ray here (a plain process): the loopback address serves one host
        return socket.gethostbyname("localhost")


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)


@CheckpointEngineRegistry.register(BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    """Broadcast the trainer's weights from trainer rank 0 to every rollout worker over gloo.

    ``engine_kwargs.gloo`` is parsed by its one declaration (``engine_options.py``), which the checks
    before Ray read too: ``timeout_s`` (default 600) bounds each collective, so a peer that died ends
    the sync with an error instead of a hang; a misspelt key is refused, not ignored.

    Seam ``cpu_gloo_checkpoint_engine``: upstream's asynchronous trainer modes need an engine that moves
    weights between separate processes, and every shipped one needs a device (nccl, which is HCCL on NPU;
    nixl; mooncake) or one process (naive). It implements upstream's abstract protocol, so a change in how the
    manager calls it or in what the workers pass to its constructor (``bucket_size``, ``is_master``,
    ``engine_kwargs``) would break it silently: the fingerprints watch those. Selected by
    ``checkpoint_engine.backend=gloo`` with ``custom_backend_module=verl.cpu.checkpoint_engine``; goes when
    upstream ships a gloo checkpoint engine.
    """

    def __init__(self, bucket_size: int, is_master: bool = False, **engine_kwargs: Any) -> None:
        options = GlooEngineOptions.from_mapping(engine_kwargs)
        if bucket_size <= 0:
            raise ValueError(f"checkpoint_engine gloo: bucket_size={bucket_size}: expected bytes > 0")
        self.bucket_size, self.is_master = int(bucket_size), is_master
        self.timeout = datetime.timedelta(seconds=float(options.timeout_s))
        self.store: Optional[dist.TCPStore] = None
        self.group = None
        self.rank: Optional[int] = None

    # ------------------------------------------------------------------ topology
    def prepare(self) -> dict[str, Any]:
        """Trainer rank 0 opens the store the group meets on; every worker reports what it is."""
        if not self.is_master:
            return {"master": None}
        host = _host()
        self.store = dist.TCPStore(host, 0, None, True, timeout=self.timeout, wait_for_workers=False)
        return {"master": {"host": host, "port": self.store.port}}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        master = metadata[0].get("master")
        if master is None:
            raise ValueError("checkpoint_engine gloo: the trainer's rank 0 did not open a store (is_master unset)")
        world = 1 + rollout_world_size
        actor = {
            "rank": [0] + [OUTSIDE] * (actor_wg_world_size - 1),
            "world_size": [world] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout = {
            "rank": list(range(1, world)),
            "world_size": [world] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: dict) -> None:
        self.rank = rank
        if rank == OUTSIDE:
            return
        try:
            if rank != 0:
                self.store = dist.TCPStore(master["host"], master["port"], None, False, timeout=self.timeout)
            self.group = dist.ProcessGroupGloo(self.store, rank, world_size, self.timeout)
        except (RuntimeError, dist.DistError) as exc:
            raise RuntimeError(
                f"checkpoint_engine gloo: the weight-sync group (trainer rank 0 and {world_size - 1} rollout "
                f"workers, meeting at {master['host']}:{master['port']}) did not form within "
                f"{self.timeout.total_seconds():g} s (engine_kwargs.gloo.timeout_s) as rank {rank}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def finalize(self) -> None:
        self.group, self.store, self.rank = None, None, None

    # ------------------------------------------------------------------ the transfer
    def _broadcast(self, tensor: torch.Tensor) -> None:
        try:
            self.group.broadcast([tensor], dist.BroadcastOptions()).wait()
        except (RuntimeError, dist.DistError) as exc:
            raise RuntimeError(
                f"checkpoint_engine gloo: the weight sync broke off at rank {self.rank} (a peer died, or stalled "
                f"past {self.timeout.total_seconds():g} s, engine_kwargs.gloo.timeout_s): {type(exc).__name__}: {exc}"
            ) from exc

    def _send_bucket(self, table: list[Piece], bucket: torch.Tensor, fill: int) -> None:
        blob = torch.frombuffer(bytearray(pickle.dumps(table)), dtype=torch.uint8) if table else None
        self._broadcast(torch.tensor([0 if blob is None else blob.numel(), fill], dtype=torch.int64))
        if blob is not None:
            self._broadcast(blob)
            self._broadcast(bucket[:fill])

    async def _pieces(self, weights):
        async for name, tensor in ensure_async_iterator(weights):
            data = _as_bytes(tensor)
            meta = (name, tensor.dtype, tuple(tensor.shape), data.numel())
            if not data.numel():
                yield meta, 0, data
            for start in range(0, data.numel(), self.bucket_size):
                yield meta, start, data[start:start + self.bucket_size]

    async def _send(self, weights) -> tuple[int, int]:
        """Fill a bucket in this thread (the weights may be gathered collectively here); send it from another."""
        bucket = torch.empty(self.bucket_size, dtype=torch.uint8)
        table: list[Piece] = []
        fill, sent, count = 0, 0, 0
        async for (name, dtype, shape, nbytes), start, data in self._pieces(weights):
            if fill + data.numel() > self.bucket_size:
                await asyncio.to_thread(self._send_bucket, table, bucket, fill)
                table, fill = [], 0
            bucket[fill:fill + data.numel()] = data
            table.append(Piece(name, dtype, shape, nbytes, start, data.numel(), fill))
            fill += data.numel()
            sent += data.numel()
            count += start + data.numel() == nbytes
        if table:
            await asyncio.to_thread(self._send_bucket, table, bucket, fill)
        await asyncio.to_thread(self._send_bucket, [], bucket, 0)  # the end
        return sent, count

    async def send_weights(self, weights, global_steps: Optional[int] = None) -> dict[str, float]:
        if self.rank is None:
            raise RuntimeError("checkpoint_engine gloo: send_weights before init_process_group")
        if self.rank == OUTSIDE:
            # Walk them all: producing each weight may be collective over the trainer's group.
            async for _ in ensure_async_iterator(weights):
                pass
            return {}
        if self.rank != 0:
            raise RuntimeError(f"checkpoint_engine gloo: rank {self.rank} is a receiver, not the sender")
        began = time.perf_counter()
        sent, count = await self._send(weights)
        return {"weight_sync/gloo_seconds": time.perf_counter() - began, "weight_sync/gloo_megabytes": sent / 2**20,
                "weight_sync/gloo_tensors": float(count)}

    def _receive_bucket(self) -> Optional[tuple[list[Piece], torch.Tensor]]:
        header = torch.empty(2, dtype=torch.int64)
        self._broadcast(header)
        length, fill = int(header[0]), int(header[1])
        if not length:
            return None
        blob = torch.empty(length, dtype=torch.uint8)
        self._broadcast(blob)
        bucket = torch.empty(fill, dtype=torch.uint8)
        self._broadcast(bucket)
        return pickle.loads(blob.numpy().tobytes()), bucket

    async def receive_weights(
        self, global_steps: Optional[int] = None
    ) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        if self.rank is None or self.rank <= 0:
            raise RuntimeError(f"checkpoint_engine gloo: rank {self.rank} does not receive weights")
        partial: dict[str, torch.Tensor] = {}
        while (got := await asyncio.to_thread(self._receive_bucket)) is not None:
            table, bucket = got
            for piece in table:
                whole = partial.setdefault(piece.name, torch.empty(piece.nbytes, dtype=torch.uint8))
                whole[piece.start:piece.start + piece.size] = bucket[piece.at:piece.at + piece.size]
                if piece.start + piece.size == piece.nbytes:
                    del partial[piece.name]
                    yield piece.name, _typed(whole, piece)
        if partial:
            raise RuntimeError(f"checkpoint_engine gloo: the sync ended with tensors incomplete: {sorted(partial)}")


def _typed(data: torch.Tensor, piece: Piece) -> torch.Tensor:
    if not piece.nbytes:
        return torch.empty(piece.shape, dtype=piece.dtype)
    return data.view(piece.dtype).reshape(piece.shape)
