"""The rollout-tail policy's settings (``trainer.v1.dapo_ascend.rollout_tail``), checked once."""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

CONFIG_KEY = "trainer.v1.dapo_ascend.rollout_tail"
BALANCE_CHOICES = ("outstanding_tokens", "requests")


class TailPolicyError(ValueError):
    """A ``rollout_tail`` setting is out of range; the message names the key and what is accepted."""


@dataclasses.dataclass(frozen=True)
class TailPolicy:
    # Off by default: upstream's synchronous DAPO sampling, untouched (only measured).
    enable: bool = False
    # Groups kept in flight = ceil(over_provision * groups still needed / expected useful
    # fraction); >= 1. The useful fraction (groups surviving dynamic sampling) is estimated.
    over_provision: float = 1.25
    # Re-submit aborted responses from their tokens in the next step (else discard them). Off by
    # default, as measured: with it the policy was slower than off on the benchmark (rollout_tail.md).
    carry_over: bool = False
    # Keep complete groups beyond the batch for the next step instead of discarding them (as
    # upstream does): no generated group is wasted, but those groups are entirely off-policy.
    keep_surplus: bool = False
    # A carried group is trained at most this many steps after the step that submitted it. The
    # cut waits for in-flight groups that reached it; kept surplus that would exceed it is dropped.
    max_staleness: int = 1
    # Replica choice: fewest outstanding tokens, or upstream's fewest in-flight requests.
    balance: str = "outstanding_tokens"
    # Counted prefill cost of a prompt token relative to one decoded token (router estimate).
    prefill_weight: float = 0.1

    @classmethod
    def from_config(cls, config) -> "TailPolicy":
        raw = OmegaConf.select(config, CONFIG_KEY, default=None)
        raw = OmegaConf.to_container(raw, resolve=True) if raw is not None else {}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise TailPolicyError(
                f"{CONFIG_KEY}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}"
            )
        policy = cls(**raw)
        policy.check()
        return policy

    def check(self) -> None:
        if not isinstance(self.enable, bool):
            raise TailPolicyError(f"{CONFIG_KEY}.enable={self.enable!r}: expected true or false")
        if not isinstance(self.keep_surplus, bool):
            raise TailPolicyError(f"{CONFIG_KEY}.keep_surplus={self.keep_surplus!r}: expected true or false")
        if not isinstance(self.carry_over, bool):
            raise TailPolicyError(f"{CONFIG_KEY}.carry_over={self.carry_over!r}: expected true or false")
        try:
            ratio = float(self.over_provision)
        except (TypeError, ValueError):
            ratio = float("nan")
        if not ratio >= 1.0:
            raise TailPolicyError(
                f"{CONFIG_KEY}.over_provision={self.over_provision!r}: expected a number >= 1.0 "
                "(groups in flight per group still needed; 1.0 = no over-provisioning)"
            )
        if not (isinstance(self.max_staleness, int) and not isinstance(self.max_staleness, bool)) or not (
            self.max_staleness >= 1
        ):
            raise TailPolicyError(
                f"{CONFIG_KEY}.max_staleness={self.max_staleness!r}: expected an integer >= 1 "
                "(steps a carried-over group may wait before it is trained; carry_over=false for none)"
            )
        if self.balance not in BALANCE_CHOICES:
            raise TailPolicyError(
                f"{CONFIG_KEY}.balance={self.balance!r}: expected one of {', '.join(BALANCE_CHOICES)}"
            )
        if not (isinstance(self.prefill_weight, (int, float)) and self.prefill_weight >= 0):
            raise TailPolicyError(f"{CONFIG_KEY}.prefill_weight={self.prefill_weight!r}: expected a number >= 0")
