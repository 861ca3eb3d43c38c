"""Rules for what upstream's replay buffer and advantage estimators take, checked before Ray.

Upstream's V1 trainer builds its replay buffer (``verl/trainer/ppo/v1/trainer_base.py::_build_replay_buffer``)
in every trainer mode, inside the task runner, after Ray, TransferQueue and the pools have started; its
constructor (``verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer.__init__``) asserts on the sampler's
values. Refused here, naming the key, the value, upstream's check and what is accepted:

- ``sampler_off_policy``: ``trainer.v1.sampler.max_off_policy_threshold`` an integer > 0 or null, and
  ``max_off_policy_strategy`` ``drop`` or ``wait`` (upstream's assertions). A boolean is refused although
  Python counts it as an int: upstream would take ``true`` as a threshold of 1 and assert on ``false``,
  and neither is what a switch-like value means. Null is upstream's "no staleness bound": accepted, with a
  note in the asynchronous modes (in ``sync`` the sampling is on-policy anyway). Skipped for a custom sampler
  (``trainer.v1.sampler.custom_sampler.{path,name}``), which owns its values.
- ``rollout_n_group``: ``actor_rollout_ref.rollout.n=1`` with an estimator that computes its advantage
  relative to the group of a prompt's responses. What upstream 0.9.1 does with a group of one
  (``verl/trainer/ppo/core_algos.py``) is one of three things, listed in ``SINGLETON``: the advantage is
  zero (nothing trains), the estimator raises inside Ray, or the group baseline falls back to 0 (mean 0,
  std 1), so the advantage is the raw reward and the run is REINFORCE without a baseline. The first two,
  and the third under DAPO's dynamic sampling (``algorithm.filter_groups.enable``: the replay buffer filters
  only groups of more than one response, so it filters nothing), are refused; the third alone is a warning.
- ``rollout_correction_bypassed``: ``algorithm.rollout_correction.rollout_is`` or ``rollout_rs`` set with
  ``bypass_mode=true``. Upstream's V1 trainer, in every trainer mode, then takes the rollout's log-probs as
  the old policy's and skips ``compute_rollout_correction_and_add_to_batch``
  (``verl/trainer/ppo/v1/trainer_base.py``): no weight and no rejection reaches the loss. The legacy
  trainer's ``apply_bypass_mode`` (bypass loss) is not on the V1 path. A warning: the run trains, without the
  correction the config asks for.
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend import trainer_mode
from verl_ascend.checks.findings import ERROR, INFO, WARN, Finding
from verl_ascend.checks.pipeline import tag
from verl_ascend.checks.view import ROLLOUT, ConfigView

SAMPLER = "trainer.v1.sampler"
THRESHOLD = f"{SAMPLER}.max_off_policy_threshold"
STRATEGY = f"{SAMPLER}.max_off_policy_strategy"
REPLAY_BUFFER = "verl/trainer/ppo/v1/replay_buffer.py::ReplayBuffer.__init__"
# What upstream's assertions accept (tests/verl_ascend/checks/test_sampler_rules.py reads them in its source).
STRATEGIES = ("drop", "wait")

ESTIMATOR = "algorithm.adv_estimator"
N = f"{ROLLOUT}.n"
FILTER = "algorithm.filter_groups.enable"
CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
ZERO, RAISES, NO_BASELINE = "zero", "raises", "no_baseline"
# Upstream 0.9.1's group-relative estimators -> what each computes for a group of one response
# (measured on upstream's functions: tests/verl_ascend/checks/test_sampler_rules.py).
SINGLETON = {
    "rloo_vectorized": ZERO,
    "grpo_passk": RAISES,
    "grpo": NO_BASELINE,
    "grpo_vectorized": NO_BASELINE,
    "gdpo": NO_BASELINE,
    "rloo": NO_BASELINE,
    "opo": NO_BASELINE,
    "gpg": NO_BASELINE,
    "reinforce_plus_plus_baseline": NO_BASELINE,
    "optimal_token_baseline": NO_BASELINE,
    "tir_optimal_token_baseline": NO_BASELINE,
}
WHAT_HAPPENS = {
    ZERO: "every advantage is zero for a group of one: the run trains on nothing",
    RAISES: "upstream raises for a group of one ('Pass@k requires at least 2 samples per group') inside Ray",
    NO_BASELINE: "for a group of one upstream's estimator falls back to a baseline of 0 (mean 0, std 1), so the "
                 "advantage is the raw reward (or its batch-whitened value): REINFORCE without a baseline, not the "
                 "estimator named",
}


def _custom_sampler(view: ConfigView) -> bool:
    return bool(view.get(f"{SAMPLER}.custom_sampler.path") and view.get(f"{SAMPLER}.custom_sampler.name"))


def sampler_off_policy(view: ConfigView) -> Iterator[Finding]:
    """The replay buffer's staleness bound and strategy, as upstream's constructor asserts them (every mode)."""
    if not view.has(SAMPLER) or _custom_sampler(view):
        return
    threshold = view.get(THRESHOLD)
    if threshold is None:
        if trainer_mode.mode_of(view) != trainer_mode.SYNC:
            yield Finding("sampler_off_policy", INFO,
                          f"{THRESHOLD}=null: upstream's replay buffer bounds no staleness ({REPLAY_BUFFER}): no "
                          "sample is dropped or awaited, however many model versions old", (THRESHOLD,))
    elif isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        why = (" (a boolean: upstream would take true as 1 and assert on false)" if isinstance(threshold, bool)
               else "")
        yield Finding("sampler_off_policy", ERROR,
                      f"{THRESHOLD}={threshold!r}{why}: upstream's {REPLAY_BUFFER} asserts an integer > 0 inside "
                      "Ray (the most model versions a trajectory may span)", (THRESHOLD,),
                      accepted="an integer >= 1 (upstream's default 8), or null for no staleness bound")
    strategy = view.get(STRATEGY)
    if strategy not in STRATEGIES:
        yield Finding("sampler_off_policy", ERROR,
                      f"{STRATEGY}={strategy!r}: upstream's {REPLAY_BUFFER} asserts one of {list(STRATEGIES)} inside "
                      "Ray, in every trainer mode (sync ignores the choice but asserts it)", (STRATEGY,),
                      accepted=" or ".join(STRATEGIES) + " (drop: evict a stale sample; wait: block until it finishes)")


def rollout_n_group(view: ConfigView) -> Iterator[Finding]:
    """``rollout.n=1`` with a group-relative estimator: what upstream computes for a group of one."""
    estimator = str(view.get(ESTIMATOR))
    if view.get(N) != 1 or estimator not in SINGLETON:
        return
    kind = SINGLETON[estimator]
    dapo = view.get_bool(FILTER)
    severity = WARN if kind == NO_BASELINE and not dapo else ERROR
    also = (f"; and {FILTER}=true (DAPO's dynamic sampling) filters nothing: upstream's replay buffer drops only "
            "groups of more than one response whose rewards are all equal (verl/trainer/ppo/v1/replay_buffer.py)"
            if dapo and kind == NO_BASELINE else "")
    yield Finding(
        "rollout_n_group", severity,
        f"{N}=1 with {ESTIMATOR}={estimator}: each prompt's group holds one response; {WHAT_HAPPENS[kind]} "
        f"({CORE_ALGOS}){also}", (N, ESTIMATOR) + ((FILTER,) if also else ()),
        accepted=f"{N} >= 2 (the DAPO recipe uses 8 to 16), or an estimator that needs no group "
                 "(gae with a critic, reinforce_plus_plus, remax)"
                 + (f"; to train on the raw reward knowingly: {FILTER}=false" if also else ""),
    )


CORRECTION = "algorithm.rollout_correction"
BYPASS = f"{CORRECTION}.bypass_mode"


def rollout_correction_bypassed(view: ConfigView) -> Iterator[Finding]:
    """Importance weights or rejection asked for in bypass mode, where the V1 trainer computes neither."""
    asked = [f"{CORRECTION}.{name}" for name in ("rollout_is", "rollout_rs") if view.get(f"{CORRECTION}.{name}")]
    if not asked or not view.get_bool(BYPASS, False):
        return
    values = ", ".join(f"{key}={view.get(key)}" for key in asked)
    yield Finding(
        "rollout_correction_bypassed", WARN,
        f"{values} with {BYPASS}=true: upstream's V1 trainer takes the rollout's log-probs as the old policy's and "
        "runs compute_rollout_correction_and_add_to_batch only when not in bypass mode "
        "(verl/trainer/ppo/v1/trainer_base.py, _compute_old_log_prob and the advantage step): no importance "
        "weight or rejection reaches the loss", (*asked, BYPASS),
        accepted=f"{BYPASS}=false for the correction (the actor recomputes the old log-probs: one more forward "
                 f"pass per step), or {CORRECTION}.rollout_is=null and rollout_rs=null to say it is off",
    )


for _rule in (sampler_off_policy, rollout_n_group, rollout_correction_bypassed):
    tag(_rule, launch=True)  # upstream would assert inside Ray, or train on something else: VERL_ASCEND_DOCTOR=0 keeps them

RULES = (sampler_off_policy, rollout_n_group, rollout_correction_bypassed)
