"""How a check takes part in the one validation pipeline (``verl_ascend.checks.validate``).

Every check is a rule: ``rule(view: ConfigView) -> Iterable[Finding]``. Rules carry three tags that
tell the composer when they run (plain doctor rules need none of them):

- ``stage``: ``"gate"`` -- a rule that decides whether the config is sound enough for the checks that
  trust it (the typed keys, upstream's config dataclasses); ``"config"`` (default) -- reads the config
  and environment only; ``"inputs"`` -- reads the files a run would read or write (model folder, data
  rows, checkpoint destination): the entry point runs these, the dry run and the doctor do not, since
  they run where the job's files need not be.
- ``trusts_config``: the rule reads keys as typed values (``int(config.data.train_batch_size)``); it is
  skipped while a gate rule reports an error, and a note says so.
- ``needs``: rule ids this rule depends on (the data-row check counts tokens with the model's
  tokenizer, so it needs ``model_unusable`` clean); it is skipped, with a note, when one of them errs.
- ``launch``: a check of the launch itself that ``VERL_ASCEND_DOCTOR=0`` (which skips the doctor's
  advice at launch) does not switch off.

``from_check`` turns a check written as "raise an error naming the key" (the preflight functions,
``TailPolicy``, upstream's ``validate_config``) into such a rule: the exception becomes one error
finding, its text unchanged, so messages that name the culprit keep doing so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from verl_ascend.checks.findings import ERROR, Finding

GATE, CONFIG, INPUTS = "gate", "config", "inputs"
STAGES = (GATE, CONFIG, INPUTS)

Rule = Callable[[Any], Iterable[Finding]]

_KEY = re.compile(r"\b((?:data|actor_rollout_ref|trainer|algorithm|reward|critic|fault_tolerance|ascend)(?:\.[A-Za-z_0-9]+)+)")


def tag(
    rule: Rule, *, stage: str = CONFIG, trusts_config: bool = False, launch: bool = False, needs: tuple[str, ...] = ()
) -> Rule:
    """Set a rule's pipeline tags (see the module docstring); returns the rule."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    rule.stage = stage  # type: ignore[attr-defined]
    rule.trusts_config = trusts_config  # type: ignore[attr-defined]
    rule.launch = launch  # type: ignore[attr-defined]
    rule.needs = tuple(needs)  # type: ignore[attr-defined]
    return rule


def stage_of(rule: Rule) -> str:
    return getattr(rule, "stage", CONFIG)


def keys_named(message: str) -> tuple[str, ...]:
    """The dotted config keys a message names, in order, once each."""
    return tuple(dict.fromkeys(m.group(1).rstrip(".") for m in _KEY.finditer(message)))


def from_check(
    rule_id: str,
    check: Callable[[Any], Any],
    errors: tuple[type[BaseException], ...] = (ValueError,),
    *,
    stage: str = CONFIG,
    trusts_config: bool = True,
    launch: bool = True,
    needs: tuple[str, ...] = (),
    prefix: str = "",
) -> Rule:
    """A rule from ``check(config)`` that raises one of ``errors`` naming the culprit."""

    def rule(view) -> Iterator[Finding]:
        try:
            check(view.config)
        except errors as exc:
            message = f"{prefix}{exc}"
            yield Finding(rule_id, ERROR, message, keys_named(message))

    rule.__name__ = rule.__qualname__ = rule_id
    rule.__doc__ = check.__doc__
    rule.__module__ = getattr(check, "__module__", __name__)
    return tag(rule, stage=stage, trusts_config=trusts_config, launch=launch, needs=needs)
