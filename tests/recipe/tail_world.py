"""A scripted rollout world for the rollout-tail sampler tests.

It answers the four TransferQueue calls upstream's ``ReplayBuffer`` makes (``kv_list``,
``kv_clear``, ``kv_batch_get``; ``KVBatchMeta`` is the real class) from an in-memory store,
and plays the role of the agent loops: a submitted prompt group becomes ``running``, and
``finish_after`` polls later it is ``finished`` with ``n`` trajectories whose ``acc`` comes
from a seeded RNG. Time advances one tick per sampler poll. ``abort()`` ends every running
group at the next tick the way the servers' abort does: without carry-over the group finishes
with partial trajectories (marked ``aborted``); with carry-over it keeps running and finishes
later (its requests were re-submitted).
"""

from __future__ import annotations

import random


class TailWorld:
    def __init__(self, seed: int = 0, n: int = 4, p_acc: float = 0.5, lengths=(1, 1, 1, 2, 2, 3, 8)):
        self.rng = random.Random(seed)
        self.n = n
        self.p_acc = p_acc
        self.lengths = lengths
        self.tick = 0
        self.step = 1
        self.store: dict[str, dict] = {"train": {}}
        self.values: dict[str, dict] = {}
        self.groups: dict[str, dict] = {}
        self.counter = 0
        self.aborts = 0
        self.carry_over = True

    # -- what the trainer does -----------------------------------------------------------------
    def submit(self, count: int) -> int:
        for _ in range(count):
            self.counter += 1
            uid = f"g{self.counter:04d}"
            accs = [self.rng.random() < self.p_acc for _ in range(self.n)]
            self.groups[uid] = {
                "finish_at": self.tick + self.rng.choice(self.lengths), "accs": accs, "aborted": False, "step": self.step
            }
            self.store["train"][uid] = {"is_prompt": True, "status": "running", "global_steps": self.step}
        return count

    def abort(self, reject: bool) -> int:
        self.aborts += 1
        live = [uid for uid, tag in self.store["train"].items() if tag.get("is_prompt") and tag["status"] == "running"]
        for uid in live:
            group = self.groups[uid]
            if reject:  # not carried: ends now, with partial responses
                group["finish_at"] = self.tick + 1
                group["aborted"] = True
            else:  # carried: continues after the next weight update
                group["finish_at"] = max(group["finish_at"], self.tick + 1)
        return len(live) * self.n

    def advance(self, *_args) -> float:
        """Stands in for the sampler's poll wait: one tick passes."""
        self.tick += 1
        for uid, group in self.groups.items():
            tag = self.store["train"].get(uid)
            if tag is None or tag["status"] != "running" or group["finish_at"] > self.tick:
                continue
            for s, acc in enumerate(group["accs"]):
                key = f"{uid}_{s}_0"
                self.store["train"][key] = {"status": "success", "response_len": 3, "global_steps": tag["global_steps"]}
                self.values[key] = {"reward_extra_info": {"acc": acc}, "aborted": group["aborted"]}
            tag["status"] = "finished"
        return 0.0

    # -- the TransferQueue calls the replay buffer makes -----------------------------------------
    def kv_list(self, partition_id=None):
        data = {p: {k: dict(t) for k, t in items.items()} for p, items in self.store.items()}
        return data if partition_id is None else {partition_id: data.get(partition_id, {})}

    def kv_clear(self, keys, partition_id):
        for key in keys:
            self.store[partition_id].pop(key, None)
            self.values.pop(key, None)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return {"extra_fields": [self.values[k] for k in keys]}

    # -- inspection ----------------------------------------------------------------------------
    def live_groups(self) -> set[str]:
        return {k for k, t in self.store["train"].items() if t.get("is_prompt")}

    def uids_in(self, batch) -> list[str]:
        return sorted({k.split("_")[0] for k in batch.keys})
