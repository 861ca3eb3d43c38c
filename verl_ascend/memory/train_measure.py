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


def _rank(rank: int, world: int, init_file: str, shapes: tuple[StepShape, ...], out: str) -> None:
    """Every shape in turn on this rank, one process group: the ranks start once for all of them."""
    import gc

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        lines = []
        for shape in shapes:
            lines.append(_one(shape))
            gc.collect()  # the last shape's model and optimizer go before the next one's window opens
        with open(out, "w") as handle:
            handle.write("\n".join(lines))
    finally:
        dist.destroy_process_group()


def _one(shape: StepShape) -> str:
    """The live and allocator peaks of one phase of ``shape`` on this rank, as one line."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from verl.utils.ulysses import set_ulysses_sequence_parallel_group

    mesh, sp_group = meshes(shape)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        parts = build(shape, mesh, sp_group)
        prepare_phase(shape, parts)
        dist.barrier()
        with record_function(WINDOW), _live_storages_mode()(_state_tensors(parts)) as live:
            run_phase(shape, parts)
        dist.barrier()
    set_ulysses_sequence_parallel_group(None)
    return f"{live.peak} {_allocator_peak(profiler)}"


@dataclass(frozen=True)
class Measured:
    live: int  # peak live tensor bytes, the busier rank
    allocator: int  # peak of the CPU allocator's own count in the window, the busier rank
    per_rank: tuple[tuple[int, int], ...]


def measure_all(shapes) -> list[Measured]:
    """Each shape's phase on real gloo ranks spawned once for all (every shape of one world size).

    Why once: starting two ranks (torch, transformers, verl imported in each) costs most of a minute on
    two cores, a tiny phase a few seconds."""
    import torch.multiprocessing as mp

    shapes = tuple(shapes)
    worlds = {shape.world_size for shape in shapes}
    if len(worlds) != 1:
        raise ValueError(f"measure_all runs one world size at a time, got {sorted(worlds)}")
    world = worlds.pop()
    with tempfile.TemporaryDirectory() as folder:
        init_file = os.path.join(folder, "init")
        outs = [os.path.join(folder, f"rank{rank}") for rank in range(world)]
        context = mp.get_context("spawn")
        procs = [context.Process(target=_rank, args=(rank, world, init_file, shapes, outs[rank]))
                 for rank in range(world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        failed = {rank: proc.exitcode for rank, proc in enumerate(procs) if proc.exitcode != 0}
        if failed:
            raise RuntimeError(f"measurement ranks failed (rank: exit code) {failed} for {shapes}")
        ranks = [[tuple(int(v) for v in line.split()) for line in open(path).read().splitlines()] for path in outs]
    return [Measured(live=max(r[i][0] for r in ranks), allocator=max(r[i][1] for r in ranks),
                     per_rank=tuple(r[i] for r in ranks)) for i in range(len(shapes))]
