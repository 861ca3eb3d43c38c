"""π_old in separate_async with recomputed old log-probs (seam ``cpu_sharded_snapshot_copies``).

Upstream's sequence in ``PPOTrainerSeparateAsync._compute_old_log_prob``, on a real FSDP2-sharded tiny Qwen2
on one gloo rank, through the save/restore handlers ``DetachActorWorker`` resolves: snapshot π_old, train one
step, snapshot the trained weights, restore π_old, compute, restore the trained weights. Without the seam the
snapshot is the live storage on a CPU and the restore gives back the trained weights.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    import torch.distributed as dist

    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture()
def sharded(one_rank, tiny_dir):
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    import verl  # noqa: F401  (loads the plugins, as every upstream worker does)
    from verl.utils.fsdp_utils import apply_fsdp2

    model = AutoModelForCausalLM.from_pretrained(tiny_dir / "demo_model", dtype=torch.float32)
    apply_fsdp2(model, {"mesh": init_device_mesh("cpu", (1,))}, {})  # upstream's wrapping: layers, then root
    return model


def _handlers():
    """Upstream's own resolution of the snapshot functions for an FSDP2 actor (imported at call time)."""
    from verl.experimental.separation.engine_workers import DetachActorWorker

    worker = SimpleNamespace(config=SimpleNamespace(actor=SimpleNamespace(strategy="fsdp2")), _strategy_handlers=None)
    return DetachActorWorker._get_strategy_handlers(worker)


def _log_probs(model, ids):
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    model.reshard()  # FSDP2 keeps the root unsharded after a forward; the snapshot reads the shards
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def _train_step(model, ids):
    optim = torch.optim.SGD(model.parameters(), lr=0.5)
    log_probs = torch.log_softmax(model(input_ids=ids).logits[:, :-1], -1)
    (-log_probs.gather(-1, ids[:, 1:, None]).mean()).backward()
    optim.step()
    model.reshard()


def test_restored_pi_old_is_the_snapshot_not_the_trained_weights(sharded):
    save, restore = _handlers()
    ids = torch.randint(3, sharded.config.vocab_size, (4, 12), generator=torch.Generator().manual_seed(1))
    pi_old = _log_probs(sharded, ids)

    saved_old = save(sharded)  # local_trigger_step 0: save_model_to_cpu(0)
    _train_step(sharded, ids)
    trained = _log_probs(sharded, ids)
    assert float((trained - pi_old).abs().max()) > 1e-2  # the step moved the policy

    saved_now = save(sharded)  # local_trigger_step 1: save_model_to_cpu(1), restore_model_from_cpu(0)
    restore(sharded, *saved_old)
    assert float((_log_probs(sharded, ids) - pi_old).abs().max()) < 1e-6, "restored π_old is the trained policy"
    restore(sharded, *saved_now)  # restore_model_from_cpu(1): training resumes from the trained weights
    assert float((_log_probs(sharded, ids) - trained).abs().max()) < 1e-6


def test_upstreams_snapshot_aliases_the_live_weights_on_a_cpu(sharded):
    """Why the row exists: upstream's ``.detach().cpu()`` is a no-op copy on a CPU."""
    import verl.utils.fsdp_utils as fsdp_utils

    patched = fsdp_utils.fsdp2_sharded_save_to_cpu
    assert getattr(patched, "__verl_cpu_patched__", False)
    upstream_state, _ = patched.__wrapped__(sharded)
    ours_state, _ = patched(sharded)
    name, param = next(iter(sharded.named_parameters()))
    live = param.to_local().untyped_storage().data_ptr()
    assert upstream_state[name][0].untyped_storage().data_ptr() == live
    assert ours_state[name][0].untyped_storage().data_ptr() != live
    assert torch.equal(ours_state[name][0], upstream_state[name][0])
    assert len(ours_state) == len(upstream_state) == len(list(sharded.parameters()))


def test_off_the_cpu_platform_upstreams_snapshot_is_returned_untouched(sharded, monkeypatch):
    import verl.utils.fsdp_utils as fsdp_utils
    from verl.cpu import snapshots

    monkeypatch.setattr(snapshots, "_on_cpu", lambda: False)
    state, spec = fsdp_utils.fsdp2_sharded_save_to_cpu(sharded)
    name, param = next(iter(sharded.named_parameters()))
    assert state[name][0].untyped_storage().data_ptr() == param.to_local().untyped_storage().data_ptr()
    assert spec is not None
