"""The plan's vocabulary: a term is bytes with a name and a source; a phase is what is resident plus what is active.

Why one small module: the training planner (fake-tensor trace) and the rollout/residency planner are
written and tested apart, and the table, verdict and advice read both through these two types only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024**3


@dataclass(frozen=True)
class Term:
    """One named amount of device (or host) memory, per card, and where the figure comes from."""

    name: str  # e.g. "sharded parameters", "activations", "logits", "KV cache"
    bytes: int
    source: str  # what computed it: "fake-tensor trace (FSDPMemTracker)", "vLLM kv_cache_spec", a file:function
    keys: tuple[str, ...] = ()  # the config keys that change this term (named in a refusal and in the advice)


@dataclass(frozen=True)
class Phase:
    """One phase of a step on one card role: what stays resident through it, and what it allocates on top."""

    name: str  # e.g. "actor update", "old log-prob", "ref log-prob", "rollout", "weight update"
    role: str  # e.g. "actor_rollout (colocated)", "trainer", "rollout"
    resident: tuple[Term, ...] = ()
    active: tuple[Term, ...] = ()
    host: tuple[Term, ...] = field(default=())  # host memory per node (offloaded states)

    @property
    def peak(self) -> int:
        return sum(t.bytes for t in self.resident) + sum(t.bytes for t in self.active)

    def dominant(self) -> Term | None:
        terms = self.resident + self.active
        return max(terms, key=lambda t: t.bytes) if terms else None


class PlanInputError(ValueError):
    """Input the plan cannot use (a model folder without config.json, an unknown architecture, a device
    memory of 0 or a string): the message names every key or file at fault and what would be accepted."""
