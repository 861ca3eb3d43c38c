"""Light probes for the rollout side: no verl import, so these processes start fast.

``RolloutServerProbe`` stands for a rollout server actor; ``read_env`` runs in a process it
spawns, the way vLLM spawns its workers.
"""

from __future__ import annotations

import os


def read_env(names, queue) -> None:
    queue.put({"pid": os.getpid(), "env": {n: os.environ.get(n) for n in names}})


class RolloutServerProbe:
    def probe(self, names):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=read_env, args=(names, queue))
        child.start()
        spawned = queue.get(timeout=120)
        child.join(timeout=60)
        return {"server": {"pid": os.getpid(), "env": {n: os.environ.get(n) for n in names}}, "spawned": spawned}
