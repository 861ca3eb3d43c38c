"""π_old kept as a real copy on the CPU backend (seam ``cpu_sharded_snapshot_copies``).

Why: in ``separate_async`` with old log-probs recomputed (``algorithm.rollout_correction.bypass_mode=false``),
upstream's ``SeparateAsyncTrainer._compute_old_log_prob`` snapshots the weights the rollout pool was last synced
with (``save_model_to_cpu(0)``) and restores them for every later local update of the sync cycle, so all of
them compute old log-probs under the same π_old. The snapshot is ``fsdp2_sharded_save_to_cpu``, which keeps
each shard as ``tensor.detach().cpu()``: a device-to-host copy on an accelerator, but on a CPU the very same
storage. Every optimizer step then writes into "π_old" too, the restore is a no-op, and local updates 2..k
recompute old log-probs with the weights they are training (measured: ``training/rollout_probs_diff_max``
0.3-0.85 instead of ~1e-7). The same snapshot serves the fully-async trainer.

What: on the CPU platform the snapshot's tensors that share storage with a live parameter are cloned; on an
accelerator (no shared storage) nothing changes. FSDP1's snapshot already copies (``to("cpu", copy=True)``).

Goes when upstream's snapshot copies by itself (the row's ``removable_if``: no ``.detach().cpu()`` left in
``fsdp2_sharded_save_to_cpu``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by the plugin at every `import verl`: no torch import here
    import torch


def _on_cpu() -> bool:
    from verl.plugin.platform import get_platform

    return get_platform().device_name == "cpu"


def _live_storages(model: torch.nn.Module) -> set[int]:
    """Addresses of the storages that hold this rank's parameters (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    return {
        (p.to_local() if isinstance(p, DTensor) else p).untyped_storage().data_ptr() for p in model.parameters()
    }


def detached(tensor: torch.Tensor, live: set[int]) -> torch.Tensor:
    """``tensor`` itself when it owns its memory, else a copy that later optimizer steps cannot reach."""
    return tensor.clone() if tensor.untyped_storage().data_ptr() in live else tensor


def copy_sharded_snapshot(saved, model: torch.nn.Module):
    """Upstream's ``(name -> (shard, spec), global_spec)`` with every shard that aliases ``model`` copied."""
    state, global_spec = saved
    live = _live_storages(model)
    return {name: (detached(shard, live), spec) for name, (shard, spec) in state.items()}, global_spec


def patch_sharded_save(module) -> None:
    """Wrap ``verl.utils.fsdp_utils.fsdp2_sharded_save_to_cpu``; upstream's workers import it at call time."""
    original = module.fsdp2_sharded_save_to_cpu
    if getattr(original, "__verl_cpu_patched__", False):
        return

    @functools.wraps(original)
    def fsdp2_sharded_save_to_cpu(model):
        saved = original(model)
        return copy_sharded_snapshot(saved, model) if _on_cpu() else saved

    fsdp2_sharded_save_to_cpu.__verl_cpu_patched__ = True
    module.fsdp2_sharded_save_to_cpu = fsdp2_sharded_save_to_cpu
