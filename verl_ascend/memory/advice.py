"""What to change so the job fits, or fits with room: budgets, gpu_memory_utilization, offload, chunking.

Why solved from plans rather than from a rule of thumb: every figure here is the planner's own at the
suggested value. Training and log-prob activations grow about linearly in the micro-batch's tokens,
so the largest budgets come from two plans (the configured budget and twice it, both budgets moved
together since each phase reads only its own key), a straight line through the two peaks, and one
more plan at the solved budgets to confirm (stepping down when the line was optimistic). Each
suggestion says what it does to the number of sequences the rollout holds at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from verl_ascend.memory.plan import Plan, gib, plan
from verl_ascend.memory.rollout import UTIL, R
from verl_ascend.memory.terms import Phase

A = "actor_rollout_ref.actor."
CHUNK = A + "fsdp_config.entropy_from_logits_with_chunking"
OFFLOAD = (A + "fsdp_config.param_offload", A + "fsdp_config.optimizer_offload")
STEP = 256  # budgets are rounded down to this many tokens


@dataclass(frozen=True)
class Suggestion:
    key: str
    value: Any
    why: str
    seqs: tuple[int, int] | None = None  # the rollout's sequences per replica at mean / max length after it

    def line(self, before: tuple[int, int]) -> str:
        effect = "rollout unchanged" if self.seqs in (None, before) else (
            f"rollout holds {self.seqs[0]} / {self.seqs[1]} sequences per replica at mean / max length "
            f"(now {before[0]} / {before[1]})")
        return f"{self.key}={self.value}: {self.why}; {effect}"


def _phase(p: Plan, name: str) -> Phase | None:
    return next((x for x in p.phases if x.name == name), None)


def budget_keys(config: Any) -> dict[str, str]:
    """phase -> the token-budget key that phase's micro-batch reads (dynamic batch size only)."""
    keys = {}
    if bool(OmegaConf.select(config, A + "use_dynamic_bsz", default=False)):
        keys["actor update"] = A + "ppo_max_token_len_per_gpu"
    if bool(OmegaConf.select(config, R + "log_prob_use_dynamic_bsz", default=False)):
        keys["old log-prob"] = R + "log_prob_max_token_len_per_gpu"
    return keys


def largest_budgets(config: Any, base: Plan, environ) -> list[Suggestion]:
    """The largest token budget of each phase that leaves ``memory.warn_headroom`` of the card free."""
    keys = budget_keys(config)
    if not keys:
        return []
    target = base.card.bytes * (1 - base.warn_headroom)
    now = {phase: int(OmegaConf.select(config, key)) for phase, key in keys.items()}
    double = plan(config, environ, overrides={**base.overrides, **{k: 2 * now[p] for p, k in keys.items()}})
    solved = {}
    for phase, key in keys.items():
        p0, p1 = _phase(base, phase), _phase(double, phase)
        if p0 is None or p1 is None or p1.peak <= p0.peak:
            continue
        slope = (p1.peak - p0.peak) / now[phase]
        solved[phase] = max(0, int((now[phase] + (target - p0.peak) / slope) // STEP * STEP))
    for _ in range(3):  # confirm, stepping down 5 % where the line was optimistic
        check = plan(config, environ, overrides={**base.overrides, **{keys[p]: b for p, b in solved.items()}})
        late = [p for p, b in solved.items() if _phase(check, p).peak > target and b > STEP]
        if not late:
            break
        for p in late:
            solved[p] = int(solved[p] * 0.95) // STEP * STEP
    out = []
    for phase, budget in solved.items():
        seq = _sequence(config)
        sp = int(OmegaConf.select(config, A + "ulysses_sequence_parallel_size", default=1) or 1)
        warn = "" if budget * sp >= seq else f" (below one {seq}-token sequence over Ulysses {sp}: verl refuses it)"
        out.append(Suggestion(keys[phase], budget, f"the largest {phase} budget that leaves "
                              f"{base.warn_headroom:.0%} of the card free (now {now[phase]}){warn}"))
    return out


def _sequence(config: Any) -> int:
    return int(OmegaConf.select(config, "data.max_prompt_length", default=0) or 0) + int(
        OmegaConf.select(config, "data.max_response_length", default=0) or 0)


def utilization(config: Any, base: Plan, environ) -> list[Suggestion]:
    """The gpu_memory_utilization that leaves room for what stays on the card while the engine generates."""
    rollout = _phase(base, "rollout")
    if rollout is None or base.card.kv_cache_bytes is not None or base.rollout.engine != "vllm":
        return []
    resident = sum(t.bytes for t in rollout.resident)
    util = math.floor((base.card.bytes * (1 - base.warn_headroom) - resident) / base.card.bytes * 100) / 100
    current = float(OmegaConf.select(config, UTIL))
    if util <= 0:
        return [Suggestion(UTIL, "none", f"what stays resident during rollout ({gib(resident)} GiB) leaves no room")]
    after = plan(config, environ, overrides={**base.overrides, UTIL: util})
    return [Suggestion(UTIL, util, f"the most that leaves {base.warn_headroom:.0%} of the card free beside "
                       f"{gib(resident)} GiB resident during rollout (now {current})",
                       (after.rollout.seqs_mean, after.rollout.seqs_max))]


def offload(config: Any, base: Plan, environ) -> list[Suggestion]:
    """Whether parameter and optimizer offload are needed: the plan with both switched the other way."""
    on = all(bool(OmegaConf.select(config, k, default=False)) for k in OFFLOAD)
    flipped = plan(config, environ, overrides={**base.overrides, **{k: not on for k in OFFLOAD}})
    seqs = (flipped.rollout.seqs_mean, flipped.rollout.seqs_max)
    if on and flipped.fits:
        room = utilization(config, flipped, environ)  # the actor stays on the card during rollout now
        at = f", with {UTIL}={room[0].value} to leave it room" if room and room[0].seqs else ""
        return [Suggestion(" and ".join(OFFLOAD), False, f"offload is not needed: without it the peak is "
                           f"{gib(flipped.peak.peak)} GiB in {flipped.peak.name!r} (saves the host transfers of every "
                           f"step){at}", room[0].seqs if room and room[0].seqs else seqs)]
    if on:
        return [Suggestion(" and ".join(OFFLOAD), True, f"offload is needed: without it {flipped.verdict()}", None)]
    if not base.fits and flipped.fits:
        return [Suggestion(" and ".join(OFFLOAD), True, f"offload makes it fit: peak {gib(flipped.peak.peak)} GiB", seqs)]
    return []


def chunking(config: Any, base: Plan, environ) -> list[Suggestion]:
    """Where chunked entropy pays: the update phase's peak with the switch the other way."""
    on = bool(OmegaConf.select(config, CHUNK, default=False))
    other = plan(config, environ, overrides={**base.overrides, CHUNK: not on})
    a, b = _phase(base, "actor update"), _phase(other, "actor update")
    if a is None or b is None:
        return []
    saved = (b.peak - a.peak) if on else (a.peak - b.peak)
    if saved <= 0:
        return [Suggestion(CHUNK, on, "chunking does not change the actor update's peak here")]
    return [Suggestion(CHUNK, True, f"chunking saves {gib(saved)} GiB of the actor update's peak"
                       + ("" if on else " (turn it on)"))]


def advise(config: Any, base: Plan, environ=None) -> list[str]:
    before = (base.rollout.seqs_mean, base.rollout.seqs_max)
    found = [*largest_budgets(config, base, environ), *utilization(config, base, environ),
             *offload(config, base, environ), *chunking(config, base, environ)]
    return [s.line(before) for s in found]
