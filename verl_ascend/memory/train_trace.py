"""Run the training-phase program under fake tensors and a fake process group; split its peak by kind.

Why fake tensors: a 32B model's step is traced on a laptop's CPU without allocating (shapes, dtypes and
storage sizes are real, data is not), through the same transformers, FSDP2 and verl code a card runs.
torch's ``FSDPMemTracker`` (a TorchDispatchMode that knows FSDP2's states) attributes every storage to
sharded/unsharded parameters, gradients, optimizer states, activations, temporaries and the all-gather and
reduce-scatter buffers, and keeps the per-kind snapshot at the peak. On top of it, ``_PlanTracker`` names
the vocabulary-wide tensors (logits, log-softmax, softmax and their gradients: every tensor whose last
dimension is the vocabulary) live at that same peak, the term chunking and the token budget change most.

Seam row ``memory_plan_tracker``: the tracker subclass below overrides torch's private ``_track`` and
``_update_peak_stats`` and reads its ``_peak_mem``, ``_in_opt`` and ``_mod_tracker``.

The fake process group is rank 0 of ``world_size`` ranks (``torch.testing._internal.distributed.fake_pg``):
every rank of a data-parallel FSDP job holds the same shapes, so rank 0's trace is every card's.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from verl_ascend.memory.train_step import StepShape, build, meshes, prepare_phase, run_phase

# FSDPMemTracker's kinds, in the order the plan lists them.
KINDS = ("Sharded Param", "Sharded Grad", "OptState", "Buffer", "Unsharded Param", "All Gather", "Unsharded Grad",
         "Reduce Scatter", "Activation", "Temp", "Inputs")
VOCAB_ACT = "Vocabulary-wide (forward)"
VOCAB_TEMP = "Vocabulary-wide (backward)"
@dataclass(frozen=True)
class Trace:
    """Bytes per kind at the traced peak of one card (rank 0), and the peak itself."""

    peak: int
    kinds: tuple[tuple[str, int], ...]  # (kind, bytes); vocabulary-wide bytes are split out of Activation/Temp
    where: str = ""  # the tracker's state and innermost modules when the peak was reached

    def get(self, kind: str) -> int:
        return dict(self.kinds).get(kind, 0)


def _tracker_class():
    """FSDPMemTracker that also records the vocabulary-wide bytes live at each new peak."""
    import weakref

    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType

    class _PlanTracker(FSDPMemTracker):
        """Labels, inside FSDPMemTracker's Activation/Temp, the vocabulary-wide tensors."""

        def __init__(self, module, optimizer, vocab: int):
            super().__init__(module, optimizer)
            self._vocab = vocab
            self._labelled: dict[int, tuple[weakref.ref, str, str]] = {}
            self.peak_where = None
            self.labelled_at_peak: dict[tuple[str, str], int] = {}

        def _track(self, reftype, t):
            super()._track(reftype, t)
            if reftype in (_FSDPRefType.ACT, _FSDPRefType.TEMP) and t.dim() and t.shape[-1] == self._vocab:
                label = VOCAB_ACT if reftype == _FSDPRefType.ACT else VOCAB_TEMP
                storage = t.untyped_storage()
                self._labelled.setdefault(id(storage), (weakref.ref(storage), reftype.value, label))

        def _update_peak_stats(self, peak_state):
            before = dict(self._peak_mem)
            super()._update_peak_stats(peak_state)
            if self._peak_mem != before:
                self.peak_where = (str(peak_state.value), sorted(self._mod_tracker.parents)[-3:], self._in_opt)
                live: dict[tuple[str, str], int] = {}
                for key, (ref, kind, label) in list(self._labelled.items()):
                    storage = ref()
                    if storage is None:
                        del self._labelled[key]
                    else:
                        live[(kind, label)] = live.get((kind, label), 0) + storage.nbytes()
                self.labelled_at_peak = live

    return _PlanTracker


def _scalars_mode():
    """Reads of a tensor's value (verl's ``.item()`` metrics) answer 1 (True) under fake tensors, which hold no data.

    No allocation depends on those values: they feed logged metrics only."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _ScalarsAreZero(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                return True if args[0].dtype == torch.bool else 1
            return func(*args, **(kwargs or {}))

    return _ScalarsAreZero()


CACHE_ENV = "VERL_ASCEND_MEMORY_CACHE"  # folder of traced peaks; "0" turns the cache off
_CACHE_FORMAT = 1


@functools.lru_cache(maxsize=32)
def trace(shape: StepShape) -> Trace:
    """The peak of one phase on rank 0 of ``shape.world_size`` fake ranks, cached per process and on disk.

    Why on disk: tracing a 32B model's step takes about a minute and a half of CPU, and a user runs the
    dry run, the doctor and the launch of one config again and again (so do the tests). The key is the
    shape plus the versions of torch, transformers and verl and the source of the traced program, so a
    changed program or package traces again; a cache file that cannot be read or written is ignored."""
    path = _cache_path(shape)
    cached = _read_cached(path) if path else None
    if cached is not None:
        return cached
    traced = _trace(shape)
    if path:
        _write_cached(path, traced)
    return traced


def _cache_path(shape: StepShape):
    """The cache file of ``shape``, or None when the cache is off."""
    import hashlib
    import importlib.metadata as metadata
    import os
    from pathlib import Path

    from verl_ascend import envs

    folder = envs.raw(CACHE_ENV)
    if folder == "0":
        return None
    folder = Path(os.path.expanduser(folder or "~/.cache/verl-ascend/memory"))
    key = hashlib.sha256(repr(shape).encode())
    for dist in ("torch", "transformers", "verl"):
        try:
            key.update(f"{dist}=={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            key.update(dist.encode())
    here = Path(__file__).parent
    for program in ("train_step.py", "train_trace.py"):
        key.update((here / program).read_bytes())
    return folder / f"trace-v{_CACHE_FORMAT}-{key.hexdigest()[:24]}.json"


def _read_cached(path) -> "Trace | None":
    try:
        data = json.loads(path.read_text())
        return Trace(peak=int(data["peak"]), kinds=tuple((str(k), int(v)) for k, v in data["kinds"]),
                     where=str(data.get("where", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cached(path, traced: Trace) -> None:
    import os

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"peak": traced.peak, "kinds": traced.kinds, "where": traced.where}))
        os.replace(partial, path)
    except OSError:
        pass  # a read-only home: the plan is still right, only slower next time


def _trace(shape: StepShape) -> Trace:
    """Trace one phase (no cache)."""
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from verl.utils.ulysses import set_ulysses_sequence_parallel_group

    if dist.is_initialized():  # a real job's process group is not ours to replace
        raise RuntimeError("the training plan traces under a fake process group of its own: run it in a "
                           "process without torch.distributed initialised (the driver, the doctor, DRY_RUN)")
    dist.init_process_group("fake", rank=0, world_size=shape.world_size, store=FakeStore())
    try:
        mesh, sp_group = meshes(shape)
        with FakeTensorMode(allow_non_fake_inputs=True), _scalars_mode():
            parts = build(shape, mesh, sp_group)
            prepare_phase(shape, parts)
            vocab = json.loads(shape.architecture)["vocab_size"]
            tracker = _tracker_class()(parts.module, parts.optimizer, vocab)
            with tracker:
                run_phase(shape, parts)
            snapshot = tracker.get_tracker_snapshot("peak")
    finally:
        set_ulysses_sequence_parallel_group(None)
        dist.destroy_process_group()
    device_snap = snapshot[torch.device("cpu")]
    kinds = {k.value if hasattr(k, "value") else str(k): v for k, v in device_snap.items() if k != "Total"}
    for (kind, label), nbytes in tracker.labelled_at_peak.items():
        kinds[kind] = kinds.get(kind, 0) - nbytes
        kinds[label] = kinds.get(label, 0) + nbytes
    ordered = tuple((k, kinds.get(k, 0)) for k in (*KINDS, VOCAB_ACT, VOCAB_TEMP))
    return Trace(peak=device_snap["Total"], kinds=ordered, where=repr(tracker.peak_where))
