"""The rollout-tail policy's settings, ``trainer.v1.dapo_ascend.rollout_tail``, declared once (``verl_ascend/sections.py``).

Registered in the entry-point group ``verl_ascend.sections`` (setup.py): the pre-Ray schema, the YAML
test and the docs' key table derive from this declaration; the trainer's parts read the typed view
``TailPolicy.from_config(config)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_ascend.sections import Section, boolean, key, non_negative_number, number, one_of, positive_int

BALANCE_CHOICES = ("outstanding_tokens", "requests")
TF = "true or false"


def at_least_one(v: Any) -> bool:
    n = number(v)
    return n is not None and n >= 1.0


@dataclass(frozen=True)
class TailPolicy(Section):
    SECTION = "trainer.v1.dapo_ascend.rollout_tail"

    # Off by default: upstream's synchronous DAPO sampling, untouched (only measured).
    enable: bool = key(False, TF, boolean)
    # Groups kept in flight = ceil(over_provision * groups still needed / expected useful
    # fraction); >= 1. The useful fraction (groups surviving dynamic sampling) is estimated.
    over_provision: float = key(1.25, "a number >= 1.0 (groups in flight per group still needed; 1.0 = no "
                                "over-provisioning)", at_least_one)
    # Re-submit aborted responses from their tokens in the next step (else discard them). Off by
    # default, as measured: with it the policy was slower than off on the benchmark (rollout_tail.md).
    carry_over: bool = key(False, TF, boolean)
    # Keep complete groups beyond the batch for the next step instead of discarding them (as
    # upstream does): no generated group is wasted, but those groups are entirely off-policy.
    keep_surplus: bool = key(False, TF, boolean)
    # A carried group is trained at most this many steps after the step that submitted it. The
    # cut waits for in-flight groups that reached it; kept surplus that would exceed it is dropped.
    max_staleness: int = key(1, "an integer >= 1 (steps a carried-over group may wait before it is trained; "
                             "carry_over=false for none)", positive_int)
    # Replica choice: fewest outstanding tokens, or upstream's fewest in-flight requests.
    balance: str = key("outstanding_tokens", f"one of {', '.join(BALANCE_CHOICES)}", one_of(BALANCE_CHOICES))
    # Counted prefill cost of a prompt token relative to one decoded token (router estimate).
    prefill_weight: float = key(0.1, "a number >= 0", non_negative_number)
