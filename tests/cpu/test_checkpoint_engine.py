"""The gloo weight-sync engine between real processes, driven the way upstream's manager drives it.

Four forked processes (forked, as DataLoader workers are: a spawned one would spend seconds importing
verl again): the trainer's rank 0 (the sender), its rank 1 (outside the group: it only
walks its weights), and two rollout workers. The test plays ``CheckpointEngineManager``: it
collects ``prepare``, calls ``build_topology``, hands each worker its ``init_process_group``
arguments, lets the sync run, then ``finalize``; twice, with other weights the second time (the
group is rebuilt per sync, as upstream does). Each rollout worker rebuilds the expected weights
itself and compares them byte for byte (NaN and -0.0 included) in its own process.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp

import pytest
import torch

BUCKET = 4096  # bytes: the 300x17 float32 tensor (20400 bytes) travels in 5 pieces


def weights(sync: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(sync)
    embed = torch.randn(300, 17, generator=gen)
    embed[0, 0], embed[0, 1] = float("nan"), -0.0
    return {
        "embed.weight": embed,
        "norm.weight": torch.randn(17, generator=gen).to(torch.bfloat16),
        "lm_head.bias": torch.randn(5, generator=gen).to(torch.float16),
        "step": torch.tensor(sync + 7, dtype=torch.int64),
        "mask": torch.rand(3, 4, generator=gen) > 0.5,
        "empty": torch.empty(0, 4),
        "last": torch.randn(2 * BUCKET // 4, generator=gen),  # exactly two buckets
        "transposed": torch.randn(6, 9, generator=gen).t(),  # not contiguous
    }


def _bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


async def _aiter(items):
    for item in items:
        yield item


def _worker(role: str, conn, syncs: int, timeout_s: float) -> None:
    try:
        _work(role, conn, syncs, timeout_s)
    except Exception as exc:  # noqa: BLE001 -- reported to the test, which asserts on it
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1)


def _work(role: str, conn, syncs: int, timeout_s: float) -> None:
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    import verl.cpu.checkpoint_engine  # noqa: F401 -- what custom_backend_module makes upstream import

    engine = CheckpointEngineRegistry.new("gloo", bucket_size=BUCKET, is_master=role == "trainer0",
                                          timeout_s=timeout_s)
    for sync in range(syncs):
        conn.send(engine.prepare())
        engine.init_process_group(**conn.recv())
        expected = weights(sync)
        if role.startswith("trainer"):
            walked = []

            def produce():
                for name, tensor in expected.items():
                    walked.append(name)
                    yield name, tensor

            source = produce() if sync % 2 == 0 else _aiter(list(produce()))  # both kinds upstream hands over
            metrics = asyncio.run(engine.send_weights(source, global_steps=sync))
            conn.send({"metrics": metrics, "walked": walked})
        else:
            async def receive():
                return [(name, t) async for name, t in engine.receive_weights(global_steps=sync)]

            got = asyncio.run(receive())
            conn.send({
                "names": [name for name, _ in got],
                "mismatched": [name for name, t in got if t.dtype != expected[name].dtype
                               or tuple(t.shape) != tuple(expected[name].shape) or _bytes(t) != _bytes(expected[name])],
            })
        engine.finalize()
    conn.close()


def _start(roles, syncs=2, timeout_s=60.0):
    import verl.cpu.checkpoint_engine  # noqa: F401 -- imported once here, inherited by the forks

    ctx = mp.get_context("fork")
    procs, conns = {}, {}
    for role in roles:
        parent, child = ctx.Pipe()
        procs[role] = ctx.Process(target=_worker, args=(role, child, syncs, timeout_s), daemon=True)
        procs[role].start()
        conns[role] = parent
    return procs, conns


def _recv(conn, role, procs, timeout=120):
    if not conn.poll(timeout):
        raise AssertionError(f"{role} said nothing within {timeout} s (exit code {procs[role].exitcode})")
    return conn.recv()


def _sync(procs, conns, trainer, rollout):
    """One sync as CheckpointEngineManager.update_weights drives it; what each worker reported."""
    from verl.cpu.checkpoint_engine import GlooCheckpointEngine

    metadata = [_recv(conns[r], r, procs) for r in trainer + rollout]
    actor_kwargs, rollout_kwargs = GlooCheckpointEngine.build_topology(len(trainer), len(rollout), metadata)
    for i, role in enumerate(trainer):
        conns[role].send({k: v[i] for k, v in actor_kwargs.items()})
    for i, role in enumerate(rollout):
        conns[role].send({k: v[i] for k, v in rollout_kwargs.items()})
    return {role: _recv(conns[role], role, procs) for role in trainer + rollout}


def test_two_syncs_reach_every_rollout_worker_bit_for_bit():
    trainer, rollout = ["trainer0", "trainer1"], ["rollout0", "rollout1"]
    procs, conns = _start(trainer + rollout)
    try:
        for sync in range(2):
            said = _sync(procs, conns, trainer, rollout)
            names = list(weights(sync))
            for role in rollout:
                assert said[role] == {"names": names, "mismatched": []}, (sync, role)
            assert said["trainer1"] == {"metrics": {}, "walked": names}  # outside the group, but walked them all
            metrics = said["trainer0"]["metrics"]
            assert said["trainer0"]["walked"] == names
            assert metrics["weight_sync/gloo_tensors"] == len(names)
            assert metrics["weight_sync/gloo_megabytes"] * 2**20 == sum(t.numel() * t.element_size()
                                                                     for t in weights(sync).values())
            assert metrics["weight_sync/gloo_seconds"] > 0
        for proc in procs.values():
            proc.join(timeout=60)
            assert proc.exitcode == 0
    finally:
        for proc in procs.values():
            proc.kill()


def test_a_receiver_that_dies_ends_the_sync_with_an_error_not_a_hang():
    trainer, rollout = ["trainer0"], ["rollout0", "rollout1"]
    procs, conns = _start(trainer + rollout, syncs=1, timeout_s=5.0)
    try:
        from verl.cpu.checkpoint_engine import GlooCheckpointEngine

        metadata = [_recv(conns[r], r, procs) for r in trainer + rollout]
        actor_kwargs, rollout_kwargs = GlooCheckpointEngine.build_topology(1, 2, metadata)
        procs["rollout1"].kill()
        procs["rollout1"].join()
        conns["trainer0"].send({k: v[0] for k, v in actor_kwargs.items()})
        conns["rollout0"].send({k: v[0] for k, v in rollout_kwargs.items()})
        said = _recv(conns["trainer0"], "trainer0", procs)
        procs["trainer0"].join(timeout=60)
        assert procs["trainer0"].exitcode == 1, said  # raised (the group never formed), did not hang
        assert said["error"].startswith("RuntimeError: checkpoint_engine gloo: the weight-sync group (trainer rank 0 "
                                        "and 2 rollout workers, meeting at "), said
        assert "did not form within 5 s (engine_kwargs.gloo.timeout_s) as rank 0" in said["error"], said
    finally:
        for proc in procs.values():
            proc.kill()


def test_topology_and_arguments_are_checked():
    from verl.cpu.checkpoint_engine import OUTSIDE, GlooCheckpointEngine

    actor, rollout = GlooCheckpointEngine.build_topology(3, 2, [{"master": {"host": "h", "port": 1}}, {}, {}, {}, {}])
    assert actor["rank"] == [0, OUTSIDE, OUTSIDE] and rollout["rank"] == [1, 2]
    assert actor["world_size"] == [3, 3, 3] and rollout["world_size"] == [3, 3]
    with pytest.raises(ValueError, match="trainer's rank 0 did not open a store"):
        GlooCheckpointEngine.build_topology(1, 1, [{"master": None}, {"master": None}])
    with pytest.raises(ValueError, match="bucket_size=0: expected bytes > 0"):
        GlooCheckpointEngine(bucket_size=0)
    with pytest.raises(ValueError, match=r"engine_kwargs.gloo.timeout_sec: unknown key; accepted keys: \['timeout_s'\]"):
        GlooCheckpointEngine(bucket_size=1, timeout_sec=5)
    for bad in (0, -1, "abc", True):  # the declaration the checks before Ray read (engine_options.py)
        with pytest.raises(ValueError, match=r"engine_kwargs.gloo.timeout_s=.*: expected a number of seconds > 0"):
            GlooCheckpointEngine(bucket_size=1, timeout_s=bad)
    assert GlooCheckpointEngine(bucket_size=1, timeout_s="2.5").timeout.total_seconds() == 2.5
