"""Sampling side of the policy: stop generating once the step has what it needs.

Two subclasses of upstream's synchronous ``ReplayBuffer`` (``trainer/ppo/v1/replay_buffer.py``):

- ``TailMeter`` (policy off): upstream's ``sample`` runs unchanged; hooks only *observe* when
  enough useful groups were complete, which groups were filtered, dropped or trained, so the
  tail is measured the same way with the policy on and off.
- ``TailCuttingSampler`` (policy on): keeps
  ``ceil(over_provision * groups still needed / expected useful fraction)`` groups in flight
  (the useful fraction -- groups that survive the dynamic-sampling filter -- is estimated from
  the groups seen so far; 0.5 before any, upstream's own refill assumption) and, once
  ``batch_size`` useful groups are complete, aborts everything else. Complete surplus groups are
  discarded (as upstream does) unless ``keep_surplus``. With ``carry_over`` the groups still running stay in
  TransferQueue and resume in the next step (oldest are selected first, as upstream does);
  without it they are discarded once their aborted requests have settled. ``max_staleness``
  bounds the carry-over: in-flight groups that reached it are waited for (trained this step).

Both are made from the buffer upstream built (``adopt``), so upstream's constructor arguments
(filter metric, refill function, poll interval) are kept as they are.

Seam ``recipe_tail_sampler``: the cutting sampler re-implements upstream's synchronous ``sample`` on
upstream's own private steps (sync metadata, eviction, selection, materialisation); it goes when upstream's
``ReplayBuffer`` can cut the tail itself (an 'enough' predicate or early-stop hook in ``sample``).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, _accumulate_eviction_metrics

from recipe.dapo_ascend.rollout_tail.policy import TailPolicy

PREFIX = "rollout_tail"
TRAIN = "train"


def uid_of(key: str) -> str:
    return key.split("_")[0]


class TailMeter(ReplayBuffer):
    """Upstream's synchronous sampling, plus the tail measurement and the group ledger."""

    # Set by ``adopt``: ledger(event, step, uids) records group fates (None: no ledger).
    ledger: Optional[Callable[[str, int, list], None]] = None

    @classmethod
    def adopt(cls, buffer: ReplayBuffer, **attrs) -> "TailMeter":
        """A sampler of this class made from the buffer upstream built in ``_build_replay_buffer``, keeping
        upstream's constructor arguments without re-deriving them (seam ``recipe_tail_sampler_adopt``; goes
        when upstream lets a trainer choose its sampler class)."""
        new = cls.__new__(cls)
        new.__dict__.update(buffer.__dict__)
        new._tail = None
        new._submitted: list[str] = []
        for name, value in attrs.items():
            setattr(new, name, value)
        return new

    # -- observation hooks (called by upstream's sample and by ours) ---------------------------
    def note_submitted(self, uids: list[str]) -> None:
        self._submitted.extend(str(u) for u in uids)

    def _sampleable_terminal_keys(self, partition_id, eviction_reasons):
        keys = super()._sampleable_terminal_keys(partition_id, eviction_reasons)
        tail = self._tail
        if tail is not None and partition_id == TRAIN and tail["enough"] is None and len(keys) >= tail["batch"]:
            tail["enough"] = time.monotonic()
        return keys

    def _evict_terminal_groups(self, global_steps, partition_id, eviction_reasons):
        out = super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)
        if self._tail is not None and partition_id == TRAIN:
            self._tail["filtered"] |= set(out[0])
        return out

    def _clear_groups(self, partition_id, uids):
        if self._tail is not None and partition_id == TRAIN and uids:
            tokens = self._tail["cleared"]
            for key, tag in self.partitions[partition_id].items():
                uid = uid_of(key)
                if uid in uids:
                    tokens[uid] = tokens.get(uid, 0) + int(tag.get("response_len", 0) or 0)
            for uid in uids:
                tokens.setdefault(uid, 0)
        super()._clear_groups(partition_id, uids)

    def _materialize_batch(self, partition_id, selected_prompt_uids, partition_snapshot):
        if self._tail is not None and partition_id == TRAIN:
            self._tail["trained"] = list(selected_prompt_uids)
        return super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)

    # -- sampling --------------------------------------------------------------------------------
    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id != TRAIN:
            return super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        self._tail = {
            "start": time.monotonic(), "enough": None, "batch": batch_size, "filtered": set(),
            "cleared": {}, "trained": [], "aborted_requests": 0, "carried": [],
        }
        try:
            batch, metrics = self._sample_train(global_steps, batch_size)
            metrics.update(self._tail_metrics(global_steps))
        finally:
            self._tail = None
        return batch, metrics

    def _sample_train(self, global_steps: int, batch_size: int):
        return ReplayBuffer.sample(self, global_steps=global_steps, partition_id=TRAIN, batch_size=batch_size)

    def _tail_metrics(self, global_steps: int) -> dict:
        tail = self._tail
        end = time.monotonic()
        total = max(end - tail["start"], 1e-9)
        tail_s = end - tail["enough"] if tail["enough"] is not None else 0.0
        filtered = tail["filtered"]
        dropped = {uid: n for uid, n in tail["cleared"].items() if uid not in filtered}
        submitted, self._submitted = self._submitted, []
        if self.ledger is not None:
            for event, uids in (
                ("submitted", submitted), ("filtered", sorted(filtered)), ("dropped", sorted(dropped)),
                ("trained", tail["trained"]), ("carried", tail["carried"]),
            ):
                self.ledger(event, global_steps, list(uids))
        return {
            f"{PREFIX}/sample_s": total,
            f"{PREFIX}/tail_s": tail_s,
            f"{PREFIX}/tail_fraction": tail_s / total,
            f"{PREFIX}/submitted_groups": len(submitted),
            f"{PREFIX}/filtered_groups": len(filtered),
            f"{PREFIX}/dropped_groups": len(dropped),
            f"{PREFIX}/dropped_tokens": sum(dropped.values()),
            f"{PREFIX}/aborted_requests": tail["aborted_requests"],
            f"{PREFIX}/carried_groups": len(tail["carried"]),
        }


class TailCuttingSampler(TailMeter):
    """Over-provision, stop at ``batch_size`` useful groups, abort the rest (policy on)."""

    policy: TailPolicy = TailPolicy(enable=True)
    # Fresh prompts are fetched in multiples of this (1 under dynamic sampling, as upstream).
    refill_granularity: int = 1
    # abort_fn(reject) -> number of requests aborted; reject=True fails requests that arrive
    # behind the closed gate instead of parking them until the next resume.
    abort_fn: Optional[Callable[[bool], int]] = None

    # Useful / terminal groups seen (decayed per step), with a Beta(1, 1) prior: 0.5 at start.
    _useful_seen: float = 0.0
    _terminal_seen: float = 0.0
    USEFUL_DECAY = 0.7
    MIN_USEFUL_FRACTION = 0.1

    def useful_fraction(self) -> float:
        """Expected share of complete groups that survive the dynamic-sampling filter."""
        if self.filter_groups_metric is None:
            return 1.0
        estimate = (self._useful_seen + 1.0) / (self._terminal_seen + 2.0)
        return max(self.MIN_USEFUL_FRACTION, estimate)

    def _learn_useful_fraction(self, useful: int, filtered: int) -> None:
        self._useful_seen = self.USEFUL_DECAY * self._useful_seen + useful
        self._terminal_seen = self.USEFUL_DECAY * self._terminal_seen + useful + filtered

    def inflight_target(self, missing: int) -> int:
        if missing <= 0:
            return 0
        return math.ceil(self.policy.over_provision * missing / self.useful_fraction() - 1e-9)

    def groups_to_submit(self, missing: int, inflight: int) -> int:
        """How many fresh prompt groups to submit now to keep the over-provisioned target."""
        short = self.inflight_target(missing) - inflight
        if short <= 0:
            return 0
        g = max(1, int(self.refill_granularity))
        return -(-short // g) * g

    def _sample_train(self, global_steps: int, batch_size: int):
        metrics: dict = {f"{PREFIX}/useful_fraction_estimate": self.useful_fraction()}
        last_debug = time.time()
        useful_seen: set = set()
        while True:
            self._sync_metadata_from_transfer_queue()
            reasons = self._terminal_eviction_reasons(global_steps, TRAIN)
            evicted, stale_count, _dapo_count, evict_metrics = self._evict_terminal_groups(global_steps, TRAIN, reasons)
            if evicted:
                _accumulate_eviction_metrics(metrics, evict_metrics, stale_count)
            sampleable = self._sampleable_terminal_keys(TRAIN, reasons)
            useful_seen |= sampleable
            if len(sampleable) >= batch_size:
                if not self._overdue(global_steps):
                    break
                # Carried groups at their staleness limit are trained this step: wait for them.
                last_debug = self._wait_for_next_poll(TRAIN, last_debug)
                continue
            inflight = len(self.pending_keys[TRAIN]) + len(self.running_keys[TRAIN])
            count = self.groups_to_submit(batch_size - len(sampleable), inflight)
            if count > 0:
                self.refill_fn(count)
                continue
            last_debug = self._wait_for_next_poll(TRAIN, last_debug)

        # Enough: everything still generating is the tail. Cut it.
        self._learn_useful_fraction(len(useful_seen), len(self._tail["filtered"]))
        inflight_uids = set(self.pending_keys[TRAIN]) | set(self.running_keys[TRAIN])
        if inflight_uids and self.abort_fn is not None:
            self._tail["aborted_requests"] = int(self.abort_fn(not self.policy.carry_over) or 0)
        selected, snapshot, _ = self._select_prompt_uids(TRAIN, sampleable, batch_size)
        surplus = set(sampleable) - set(selected)
        # Complete surplus is discarded, as upstream does, unless keep_surplus: then it is trained
        # next step (oldest first), entirely on the previous step's policy, within max_staleness.
        kept = set()
        if self.policy.keep_surplus:
            kept = {u for u in surplus if self._age(u, global_steps + 1) <= self.policy.max_staleness}
        self._clear_groups(TRAIN, surplus - kept)
        if self.policy.carry_over:
            self._tail["carried"] = sorted(inflight_uids | kept)
        else:
            self._tail["carried"] = sorted(kept)
            self._discard_when_settled(inflight_uids, last_debug)
        return self._materialize_batch(TRAIN, selected, snapshot), metrics

    def _age(self, uid: str, global_steps: int) -> int:
        """Steps between the step that submitted ``uid`` and ``global_steps``."""
        return global_steps - self.prompt_global_steps[TRAIN].get(uid, global_steps)

    def _overdue(self, global_steps: int) -> set:
        """In-flight groups that cannot be carried again (staleness limit reached)."""
        if not self.policy.carry_over:
            return set()  # nothing in flight is ever carried
        inflight = self.pending_keys[TRAIN] | self.running_keys[TRAIN]
        return {u for u in inflight if self._age(u, global_steps) >= self.policy.max_staleness}

    def _discard_when_settled(self, uids: set, last_debug: float) -> None:
        """Wait until the aborted groups' sessions have all returned, then clear them.

        Clearing a group while a sibling session may still write would leave orphans behind
        (upstream's agent loop publishes a group's status only after every session settled).
        """
        while True:
            self._sync_metadata_from_transfer_queue()
            live = uids & (self.pending_keys[TRAIN] | self.running_keys[TRAIN])
            if not live:
                break
            last_debug = self._wait_for_next_poll(TRAIN, last_debug)
        self._clear_groups(TRAIN, set(uids))
