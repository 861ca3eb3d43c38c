"""Dynamic-sampling rules: DAPO's group filtering as upstream 0.9.1's trainers implement it.

In 0.9.1 group filtering lives only in the V1 trainer's built-in replay buffer
(``trainer/ppo/v1/replay_buffer.py``, wired in ``trainer_base._build_replay_buffer``): it evicts
groups whose metric has no variance and refills. The legacy trainer (``trainer.use_v1=false``) has
no filtering at all, and the V1 buffer ignores several knobs older DAPO scripts set:
``max_num_gen_batches`` (only a log warning), ``data.gen_batch_size`` (forced to 1 while filtering),
and ``max_inflight_gen_batches`` outside the ``sync`` trainer mode.
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend.checks.findings import ERROR, WARN, Finding
from verl_ascend.checks.pipeline import tag
from verl_ascend.checks.view import ConfigView
from verl_ascend.trainer_mode import KEY as MODE
from verl_ascend.trainer_mode import SYNC, mode_of

FG = "algorithm.filter_groups"
# Upstream's _build_replay_buffer builds the synchronous ReplayBuffer (the only one that reads
# max_inflight_gen_batches) for the "sync" mode only; every other mode gets ReplayBufferAsync.


def dynamic_sampling_ignored(view: ConfigView) -> Iterator[Finding]:
    if not view.get_bool(f"{FG}.enable"):
        return
    if not view.uses_v1_trainer:
        yield Finding(
            "dynamic_sampling_ignored",
            ERROR,
            "algorithm.filter_groups.enable=True but trainer.use_v1=False: upstream 0.9.1's legacy trainer has no "
            "dynamic sampling, so all-correct and all-wrong groups would be trained on (zero advantage, wasted "
            "compute, not DAPO). Set trainer.use_v1=True.",
            (f"{FG}.enable", "trainer.use_v1"),
        )
        return
    path = view.get("trainer.v1.sampler.custom_sampler.path")
    name = view.get("trainer.v1.sampler.custom_sampler.name")
    if path and name:
        yield Finding(
            "dynamic_sampling_ignored",
            WARN,
            f"a custom sampler ({path}:{name}) replaces upstream's replay buffer, which is where group filtering "
            "lives: algorithm.filter_groups takes effect only if your sampler implements it. Check that it does, "
            "or remove trainer.v1.sampler.custom_sampler.",
            (f"{FG}.enable", "trainer.v1.sampler.custom_sampler.path"),
        )


def dynamic_sampling_knobs(view: ConfigView) -> Iterator[Finding]:
    if not view.uses_v1_trainer:
        return
    enabled = view.get_bool(f"{FG}.enable")
    max_gen = view.get_int(f"{FG}.max_num_gen_batches", 0) or 0
    if max_gen > 0:
        yield Finding(
            "dynamic_sampling_knob_ignored",
            WARN,
            f"algorithm.filter_groups.max_num_gen_batches={max_gen} is ignored by the V1 trainer (it only logs a "
            "warning): generation is never capped by it. Bound speculative generation with "
            "algorithm.filter_groups.max_inflight_gen_batches and set max_num_gen_batches=0.",
            (f"{FG}.max_num_gen_batches",),
        )
    gen_batch = view.get_int("data.gen_batch_size")
    if enabled and gen_batch not in (None, 1) and mode_of(view) == SYNC:
        yield Finding(
            "dynamic_sampling_knob_ignored",
            WARN,
            f"data.gen_batch_size={gen_batch} is replaced by 1 while dynamic sampling is on (the V1 buffer dispatches "
            "refills prompt by prompt): the old 'generate N x the batch' oversampling does not happen. Remove it; "
            "use algorithm.filter_groups.max_inflight_gen_batches to allow more prompts in flight.",
            ("data.gen_batch_size", f"{FG}.enable"),
        )
    inflight = view.get_int(f"{FG}.max_inflight_gen_batches", 1)
    mode = mode_of(view)
    if inflight not in (None, 1) and (not enabled or mode != SYNC):
        why = (
            "dynamic sampling is off"
            if not enabled
            else f"{MODE}={mode!r}: upstream builds the replay buffer that reads it only for "
            f"{MODE}='sync' (others get ReplayBufferAsync)"
        )
        yield Finding(
            "dynamic_sampling_knob_ignored",
            WARN,
            f"algorithm.filter_groups.max_inflight_gen_batches={inflight} has no effect because {why}.",
            (f"{FG}.max_inflight_gen_batches", MODE, f"{FG}.enable"),
        )


GEN = "data.gen_batch_size"
UPSTREAM_DATALOADER = "verl/trainer/ppo/v1/trainer_base.py::PPOTrainer._init_dataloader"
UPSTREAM_FETCH = "verl/trainer/ppo/v1/trainer_base.py::PPOTrainer._next_train_batch"


def gen_batch_size_upstream(view: ConfigView) -> Iterator[Finding]:
    """``data.gen_batch_size`` as upstream's V1 trainer treats it at step 1.

    Upstream's ``_init_dataloader`` forces it to 1 in every async mode (``logger.warning`` only), and with
    ``trainer.v1.sampler.sync_refill_failed_groups`` (with dynamic sampling, ``dynamic_sampling_knobs`` says
    so). Where it is kept, each step fetches ``train_batch_size`` prompts in whole ``gen_batch_size`` chunks
    and ``_next_train_batch`` raises ``ValueError`` unless ``train_batch_size`` is a multiple of it.
    """
    if not view.uses_v1_trainer:
        return
    gen, train, mode = view.get_int(GEN), view.get_int("data.train_batch_size"), mode_of(view)
    if gen in (None, 1) or gen <= 0 or not train or train <= 0:
        return
    refill = view.get_bool("trainer.v1.sampler.sync_refill_failed_groups", False)
    if mode != SYNC or refill:
        if view.get_bool(f"{FG}.enable") and mode == SYNC:
            return  # dynamic_sampling_knobs names it
        why = f"{MODE}={mode!r}" if mode != SYNC else "trainer.v1.sampler.sync_refill_failed_groups=true"
        yield Finding(
            "gen_batch_size_overridden", WARN,
            f"{GEN}={gen} is overridden to 1 by upstream ({UPSTREAM_DATALOADER}: 'data.gen_batch_size={gen} is "
            f"overridden to 1.') with {why}: prompts are fetched and dispatched one by one",
            (GEN, MODE), accepted=f"{GEN} unset or 1",
        )
        return
    if view.get_bool(f"{FG}.enable") or train % gen == 0:
        return
    multiples = ", ".join(str(d) for d in range(1, train + 1) if train % d == 0)
    yield Finding(
        "gen_batch_size_not_dividing", ERROR,
        f"{GEN}={gen} with data.train_batch_size={train} in {MODE}='sync' without dynamic sampling: upstream keeps "
        f"it and fetches each step's {train} prompts in whole chunks of {gen}; {UPSTREAM_FETCH} raises ValueError "
        f"'num_prompts ({train}) must be a positive multiple of gen_batch_size ({gen})' at step 1",
        (GEN, "data.train_batch_size", f"{FG}.enable"),
        accepted=f"{GEN} unset, or one dividing {train} ({multiples})",
    )


tag(gen_batch_size_upstream, launch=True)  # upstream raises at step 1, inside Ray

RULES = (dynamic_sampling_ignored, dynamic_sampling_knobs, gen_batch_size_upstream)
