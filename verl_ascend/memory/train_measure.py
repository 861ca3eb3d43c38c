"""Measure the training-phase program on real tensors: FSDP2 over 2 gloo ranks on this CPU.

Two figures per rank, neither from the plan's tracker (FSDPMemTracker and its FSDP-state bookkeeping):

- ``live``: the peak of live tensor memory. ``_LiveStorages`` is a TorchDispatchMode that knows every
  untyped storage the process's tensors use: the module's parameters, gradients, buffers and the
  optimizer's states when it opens, then every storage an operator reads or returns. A weakref drops a
  storage when it dies; after every operator the mode sums ``nbytes()`` of the live ones (read at that
  moment, so FSDP2's ``storage.resize_`` of its unsharded buffers counts when it happens). This is the
  figure the plan is held to.
- ``allocator``: what torch's CPU allocator reports to the profiler (``profile_memory=True``: every
  allocation and free as a ``[memory]`` event), summed from before the model is built, peak inside the
  phase's window. It also sees what no tensor holds: gloo's own staging copies inside collectives (a
  whole all-gather output, a reduce-scatter input, flat all-to-all buffers), freed by gloo's thread
  whenever it gets to it. That part belongs to gloo on a CPU, not to the job on a card (HCCL writes in
  place), so it is reported next to the live figure, not planned.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from dataclasses import dataclass

from verl_ascend.memory.train_step import StepShape, build, meshes, prepare_phase, run_phase

WINDOW = "verl_ascend.memory.phase"


def _live_storages_mode():
    import torch
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class _LiveStorages(TorchDispatchMode):
        def __init__(self, seed_tensors):
            super().__init__()
            self._storages: dict[int, weakref.ref] = {}
            for tensor in seed_tensors:
                self._see(tensor)
            self.peak = self.now()

        def _see(self, tensor) -> None:
            if isinstance(tensor, DTensor):
                tensor = tensor._local_tensor
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                return
            storage = tensor.untyped_storage()
            key = id(storage)
            if key not in self._storages:
                self._storages[key] = weakref.ref(storage, lambda _, key=key: self._storages.pop(key, None))

        def now(self) -> int:
            return sum(s.nbytes() for ref in list(self._storages.values()) if (s := ref()) is not None)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(t is DTensor for t in types):
                return NotImplemented  # let DTensor turn into its local operators, which come back here
            out = func(*args, **(kwargs or {}))
            for leaf in tree_leaves((args, kwargs, out)):
                self._see(leaf)
            self.peak = max(self.peak, self.now())
            return out

    return _LiveStorages


def _state_tensors(parts) -> list:
    tensors = [*parts.module.parameters(), *parts.module.buffers()]
    tensors += [p.grad for p in parts.module.parameters() if p.grad is not None]
    if parts.optimizer is not None:
        tensors += [v for state in parts.optimizer.state.values() for v in state.values() if hasattr(v, "shape")]
    return tensors


def _allocator_peak(profiler) -> int:
    """The largest running sum of the CPU allocator's events inside the window (sum from profile start)."""
    import torch

    events = profiler.profiler.kineto_results.events()
    start, end = next((e.start_ns(), e.end_ns()) for e in events if e.name() == WINDOW)
    memory = sorted((e.start_ns(), e.nbytes()) for e in events
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for stamp, nbytes in memory:
        if stamp > end:
            break
        live += nbytes
        peak = max(peak, live) if stamp >= start else live
    return peak


def _rank(rank: int, world: int, init_file: str, shape: StepShape, out: str) -> None:
    """One phase of ``shape`` on this rank: its live and allocator peaks written to ``out``."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        mesh, sp_group = meshes(shape)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
            parts = build(shape, mesh, sp_group)
            prepare_phase(shape, parts)
            dist.barrier()
            with record_function(WINDOW), _live_storages_mode()(_state_tensors(parts)) as live:
                run_phase(shape, parts)
            dist.barrier()
        with open(out, "w") as handle:
            handle.write(f"{live.peak} {_allocator_peak(profiler)}")
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class Measured:
    live: int  # peak live tensor bytes, the busier rank
    allocator: int  # peak of the CPU allocator's own count in the window, the busier rank
    per_rank: tuple[tuple[int, int], ...]


# Imported once by the fork server; every rank of every shape is a fork of it.
PRELOAD = ["verl_ascend.memory.train_step", "transformers.models.qwen2.modeling_qwen2", "verl.utils.fsdp_utils",
           "verl.utils.ulysses", "verl.utils.torch_functional", "verl.workers.config.optimizer"]


def measure_all(shapes) -> list[Measured]:
    """Each shape's phase on ``shape.world_size`` real gloo ranks, fresh processes for every shape.

    Why a fork server: spawning two ranks that import torch, transformers and verl costs most of a minute
    on two cores, a tiny phase a few seconds; forks of a server that imported them once start at once, and
    each shape still runs in processes of its own (no state left from the shape before)."""
    import torch.multiprocessing as mp

    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return [_measure(context, shape) for shape in shapes]


def _measure(context, shape: StepShape) -> Measured:
    with tempfile.TemporaryDirectory() as folder:
        init_file = os.path.join(folder, "init")
        outs = [os.path.join(folder, f"rank{rank}") for rank in range(shape.world_size)]
        procs = [context.Process(target=_rank, args=(rank, shape.world_size, init_file, shape, outs[rank]))
                 for rank in range(shape.world_size)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        failed = {rank: proc.exitcode for rank, proc in enumerate(procs) if proc.exitcode != 0}
        if failed:
            raise RuntimeError(f"measurement ranks failed (rank: exit code) {failed} for {shape}")
        per_rank = tuple(tuple(int(v) for v in open(path).read().split()) for path in outs)
    return Measured(live=max(r[0] for r in per_rank), allocator=max(r[1] for r in per_rank), per_rank=per_rank)
