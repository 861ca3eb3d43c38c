"""Will the job fit its cards? The memory plan (``verl_ascend.memory``) as rules of the one pipeline.

- ``memory_exceeds_device`` (error, also at launch): a phase's planned peak exceeds the card; the finding
  names the phase, its largest term and the keys that change it, before Ray starts and before a 32B
  checkpoint loads on 128 cards only to fail.
- ``memory_headroom_low`` (warning): a phase fits with less than ``memory.warn_headroom`` (default 5 %)
  of the card left. Why 5 %: what the plan does not count lives there -- the caching allocator's
  fragmentation, the runtime's workspaces, and vllm-ascend's sleep/wake leak (#9563: about 240 MB a
  cycle, ~0.4 % of a 910B); at 5 % of 61.3 GiB (3 GiB) a run survives a dozen such cycles between restarts.
- ``memory_input`` (error): a device declaration the plan cannot use (``memory.device``, HCCL_BUFFSIZE).
A plan that cannot be made for the model (a model folder that is not there: the launch's model check
refuses that, and the doctor runs where the model need not be) gives no finding; the dry run's memory
section says why. A plan that fits gives none either: the dry run prints its table.

``memory.check=false`` switches all of them off.
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.pipeline import tag
from verl_ascend.checks.view import ConfigView

MODEL_KEY = "actor_rollout_ref.model.path"


def memory_plan(view: ConfigView) -> Iterator[Finding]:
    """The plan's verdict: each phase's peak against the card."""
    from verl_ascend.memory.options import MemoryOptions
    from verl_ascend.memory.plan import cached_plan, gib, refusal
    from verl_ascend.memory.terms import PlanInputError

    if not MemoryOptions.from_config(view.config).check:
        return
    try:
        plan = cached_plan(view.config, view.environ)
    except PlanInputError as exc:
        if MODEL_KEY not in str(exc):
            from verl_ascend.checks.pipeline import keys_named

            yield Finding("memory_input", ERROR, str(exc), keys_named(str(exc)) or ("memory.device",))
        return
    for phase in plan.over:
        term = plan.culprit(phase)
        yield Finding("memory_exceeds_device", ERROR, f"{refusal(plan, phase)}. See `verl-ascend memory` for "
                      "the budgets that fit.", term.keys + ("memory.device_gib",))
    if plan.kv_short:
        yield Finding("memory_exceeds_device", ERROR, plan.kv_short, plan.rollout.kv_cache.keys or plan.rollout.weights.keys)
    for phase in plan.tight:
        yield Finding("memory_headroom_low", WARN, f"phase {phase.name!r} ({phase.role}) leaves "
                      f"{gib(plan.headroom(phase))} GiB of {gib(plan.card.bytes)} GiB free, below memory.warn_headroom="
                      f"{plan.warn_headroom}: fragmentation and the sleep/wake leak (vllm-ascend #9563) live there",
                      plan.culprit(phase).keys + ("memory.warn_headroom",))


tag(memory_plan, trusts_config=True, launch=True)

RULES = (memory_plan,)
