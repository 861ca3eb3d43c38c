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
    if enabled and gen_batch not in (None, 1):
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


RULES = (dynamic_sampling_ignored, dynamic_sampling_knobs)
