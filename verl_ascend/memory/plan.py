"""The memory plan of a composed config: every phase of a step on each card role, against the card.

``plan(config)`` joins the two planners through the shared types (``terms.py``): the training phases
(``training.py``: verl's micro-batch path under fake tensors) and the rollout engine and residency
(``rollout.py``, ``residency.py``: vLLM's and vllm-ascend's own accounting). The verdict names, for the
first phase that does not fit, the phase, its dominant term and the keys that change that term.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf, open_dict

from verl_ascend.memory import residency
from verl_ascend.memory.devices import DeviceMemory, device_memory
from verl_ascend.memory.rollout import Rollout
from verl_ascend.memory.terms import GIB, Phase, Term


@dataclass(frozen=True)
class Plan:
    phases: tuple[Phase, ...]
    card: DeviceMemory
    rollout: Rollout
    host_per_node: int
    warn_headroom: float
    seconds: float = 0.0
    overrides: Mapping[str, object] = field(default_factory=dict)

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.peak)

    def headroom(self, phase: Phase) -> int:
        return self.card.bytes - phase.peak

    @property
    def over(self) -> tuple[Phase, ...]:
        """The phases whose peak exceeds the card, largest first."""
        return tuple(sorted((p for p in self.phases if p.peak > self.card.bytes), key=lambda p: -p.peak))

    @property
    def tight(self) -> tuple[Phase, ...]:
        """Phases that fit with less than ``memory.warn_headroom`` of the card left."""
        floor = self.warn_headroom * self.card.bytes
        return tuple(p for p in self.phases if 0 <= self.headroom(p) < floor)

    @property
    def kv_short(self) -> str | None:
        """Why vLLM would refuse to start for want of KV cache (not one maximum-length sequence fits), or None."""
        r = self.rollout
        if r.engine != "vllm" or r.seqs_max > 0:
            return None
        return (f"the rollout's KV cache ({r.num_blocks} blocks of {r.block_size} tokens, {gib(r.kv_cache.bytes)} GiB "
                f"per card) holds no {r.max_len}-token sequence: vLLM refuses to start (vllm/v1/core/kv_cache_utils.py "
                f"_check_enough_kv_cache_memory); keys that change it: {', '.join(r.kv_cache.keys or r.weights.keys)}, "
                "data.max_response_length")

    @property
    def fits(self) -> bool:
        return not self.over and self.kv_short is None

    def culprit(self, phase: Phase) -> Term:
        """The term to change: the phase's largest term that a config key moves (else its largest)."""
        keyed = [t for t in phase.resident + phase.active if t.keys]
        return max(keyed or list(phase.resident + phase.active), key=lambda t: t.bytes)

    def verdict(self) -> str:
        if self.fits:
            p = self.peak
            return (f"fits: peak {gib(p.peak)} GiB in {p.name!r} ({p.role}) of {gib(self.card.bytes)} GiB "
                    f"({self.card.name}), headroom {gib(self.headroom(p))} GiB")
        return "; ".join([refusal(self, p) for p in self.over] + ([self.kv_short] if self.kv_short else []))


def refusal(plan: Plan, phase: Phase) -> str:
    term = plan.culprit(phase)
    return (f"does not fit: phase {phase.name!r} ({phase.role}) peaks at {gib(phase.peak)} GiB on a "
            f"{gib(plan.card.bytes)} GiB {plan.card.name}, {gib(-plan.headroom(phase))} GiB over; its largest "
            f"term {term.name!r} is {gib(term.bytes)} GiB; keys that change it: {', '.join(term.keys)}")


def gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def with_overrides(config: Any, overrides: Mapping[str, object] | None) -> Any:
    """A copy of ``config`` with each dotted key of ``overrides`` set (the plan's "what if")."""
    if not overrides:
        return config
    config = copy.deepcopy(config)
    with open_dict(config):
        for key, value in overrides.items():
            OmegaConf.update(config, key, value, force_add=True)
    return config


def plan(config: Any, environ: Mapping[str, str] | None = None, *,
         overrides: Mapping[str, object] | None = None) -> Plan:
    """The plan of ``config`` (with ``overrides``); PlanInputError names the key or file it cannot use."""
    from verl_ascend.memory import training
    from verl_ascend.memory.options import MemoryOptions

    start = time.perf_counter()
    environ = dict(os.environ if environ is None else environ)
    config = with_overrides(config, overrides)
    card = device_memory(config, environ)
    arch = training.load_architecture(config)
    trained = training.plan_training(config, overrides=dict(overrides or {}))
    phases, rollout = residency.phases(config, arch, card, trained)
    return Plan(phases, card, rollout, residency.host_per_node(phases, config),
                float(MemoryOptions.from_config(config).warn_headroom), time.perf_counter() - start,
                dict(overrides or {}))


_ENV_READ = ("HCCL_BUFFSIZE", "VLLM_CPU_KVCACHE_SPACE")  # the variables the device declarations read
_cache: dict[str, Plan] = {}


def cached_plan(config: Any, environ: Mapping[str, str] | None = None) -> Plan:
    """``plan(config)``, computed once per config and environment within a process: the doctor's rule and
    the dry run's table read one plan (a 32B plan traces the model)."""
    environ = dict(os.environ if environ is None else environ)
    key = OmegaConf.to_yaml(config, resolve=False) + repr([environ.get(v) for v in _ENV_READ])
    if key not in _cache:
        if len(_cache) > 8:
            _cache.clear()
        _cache[key] = plan(config, environ)
    return _cache[key]
