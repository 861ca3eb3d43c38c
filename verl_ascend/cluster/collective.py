"""A small all-reduce across every node on the job's backend, bounded in time, with its bandwidth.

Why our own rendezvous store: ``init_process_group`` on a node that never arrives waits for the full
timeout and then says only that it timed out (CANN's ``EI0006 Get_Socket_Timeout`` after 120 s is the
NPU form). Each rank first writes ``joined/<rank>`` into a ``TCPStore`` hosted by rank 0; when the
group does not form within the bound, the ranks missing from the store are the nodes that could not
reach rank 0, named at once. Ranks that reached the store but whose group still failed are named with
their own error (a pair connection that failed: the wrong interface, a closed port).

Bandwidth: ``bytes`` of float32 all-reduced ``ITERATIONS`` times after one warm-up; the bus bandwidth is
the algorithm bandwidth times 2(n-1)/n (the factor of a ring all-reduce, as nccl-tests/hccl_test report it).
"""

from __future__ import annotations

import time
from datetime import timedelta

from verl_ascend.cluster import cells

ITERATIONS = 3
JOINED = "joined/{}"


def run_rank(rank: int, world: int, master: str, port: int, backend: str, device: str, timeout_s: float,
             nbytes: int) -> dict:
    """One rank's part, inside a Ray actor on its node: join, all-reduce, time; a dict of what happened."""
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    started = time.monotonic()
    try:
        store = dist.TCPStore(master, port, world, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 - every failure is reported with the rank that met it
        return {"rank": rank, "ok": False, "stage": "rendezvous", "error": _short(exc)}
    store.set(JOINED.format(rank), "1")
    try:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        if device != "cpu":
            getattr(torch, device).set_device(0)
        tensor = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor)  # warm-up: the first call builds the connections
        _sync(torch, device)
        begin = time.perf_counter()
        for _ in range(ITERATIONS):
            dist.all_reduce(tensor)
        _sync(torch, device)
        seconds = (time.perf_counter() - begin) / ITERATIONS
        correct = float(tensor[0]) == float(world ** (ITERATIONS + 1))
        dist.destroy_process_group()
        return {"rank": rank, "ok": correct, "stage": "all_reduce", "seconds": seconds, "bytes": tensor.numel() * 4,
                "join_s": time.monotonic() - started, "error": "" if correct else "wrong all-reduce result"}
    except Exception as exc:  # noqa: BLE001
        missing = [r for r in range(world) if not _joined(store, r)] if rank == 0 else []
        return {"rank": rank, "ok": False, "stage": "group", "error": _short(exc), "missing": missing}


def _joined(store, rank: int) -> bool:
    try:
        return bool(store.check([JOINED.format(rank)]))
    except Exception:  # noqa: BLE001 - the store itself is gone: nothing can be said of that rank
        return False


def _sync(torch, device: str) -> None:
    if device != "cpu":
        getattr(torch, device).synchronize()


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}"


def waited(result: dict) -> bool:
    """The rank's failure is a wait that ran out (another rank never came), not an error of its own."""
    error = result.get("error", "").lower()
    return "timeout" in error or "timed out" in error


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """Bytes per second on the bus of a ring all-reduce of ``nbytes`` that took ``seconds`` across ``world`` ranks."""
    return nbytes / seconds * 2 * (world - 1) / world if seconds > 0 and world > 1 else 0.0


def collective_cells(results: dict[str, dict | None], labels: dict[str, str], ranks: dict[str, int], backend: str,
                     timeout_s: float) -> dict[str, cells.Cell]:
    """Per node, from each rank's result (None: the rank did not answer within the bound)."""
    world = len(ranks)
    by_rank = {rank: node for node, rank in ranks.items()}
    rank0 = results.get(by_rank.get(0)) or {}
    unreachable = {by_rank[r] for r in rank0.get("missing", []) if r in by_rank}
    # a rank that failed on its own (no answer, never joined, its own error) is the culprit; the ranks that only
    # waited for it and timed out are not named again
    culprits = {n for n, r in results.items() if r is None or n in unreachable or (not r["ok"] and not waited(r))}
    out = {}
    for node, result in results.items():
        if culprits and node not in culprits and not result["ok"]:
            out[node] = cells.skip("collective", f"{backend}: the group did not form, this rank waited for "
                                   f"{', '.join(sorted(labels[n] for n in culprits))}")
        elif result is None:
            out[node] = cells.fail("collective", f"{backend}: no answer within {timeout_s:g} s", "the rank joining the group",
                                   "this node is hung or overloaded: see its Ray logs; restart its Ray")
        elif node in unreachable:
            out[node] = cells.fail("collective", f"{backend}: never reached rank 0's store at {labels[by_rank[0]]} within "
                                   f"{timeout_s:g} s ({result['error']})", "every node reaching rank 0",
                                   "open the route and ports between this node and rank 0's node (firewall, subnet); check "
                                   "the *_SOCKET_IFNAME interfaces")
        elif not result["ok"]:
            out[node] = cells.fail("collective", f"{backend} {result['stage']}: {result['error']}",
                                   f"an all-reduce across {world} nodes", "see the socket and ports cells of this node; "
                                   "the ranks exchange addresses of the interfaces *_SOCKET_IFNAME names")
        else:
            busbw = bus_bandwidth(result["bytes"], result["seconds"], world)
            out[node] = cells.ok("collective", f"{backend} all-reduce {result['bytes'] / 2**20:.0f} MiB x {world} nodes: "
                                 f"{result['seconds'] * 1e3:.1f} ms, bus {busbw / 1e9:.2f} GB/s",
                                 seconds=result["seconds"], bytes=result["bytes"], bus_bytes_per_s=busbw,
                                 join_s=result.get("join_s"))
    return out
