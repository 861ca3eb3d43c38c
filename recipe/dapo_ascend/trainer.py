"""The recipe's trainer: upstream's V1 trainer, in the mode the user picked, plus what DAPO users read.

The user picks upstream's mode with upstream's key and values, ``sync|colocate_async|separate_async``
(``verl_ascend/trainer_mode.py``). Each mode has one class here, registered with upstream's
``register_trainer`` under the recipe's name for it (``recipe/dapo_ascend/modes.py``: ``dapo_ascend``,
``dapo_ascend.colocate_async``, ``dapo_ascend.separate_async``), which the task runner resolves the
user's mode to (the config keeps the user's mode): ``DAPOAscendHooks`` put in front of
upstream's own class for that mode, so upstream's loop, weight sync and partial rollout run as
shipped and the hooks below add the recipe's components. It changes no algorithm:

- per step, it logs the means of the reward manager's extra fields (``acc``, and with
  ``overlong_buffer_cfg.log=true`` the DAPO overlong penalty) as ``reward_extra/<key>/mean``,
  which upstream's V1 trainer computes but logs only during validation; with dynamic sampling,
  also ``reward_extra/<filter metric>/sampled_mean`` over every response sampled, the groups it
  filtered out included (the trained batch's mean is biased by that filter);
- ``trainer.v1.dapo_ascend.poll_interval_s`` sets how often the replay buffer checks for
  finished rollouts. Upstream hard-codes 2 s, which rounds every generation round up to a
  multiple of 2 s: noise on a 128-card step, most of the step on a tiny CPU run;
- ``trainer.v1.dapo_ascend.reward_in_agent_loop`` (off by default) hands the agent loops a
  reward handle that scores rule-based rewards in their own process (``local_reward.py``)
  instead of a Ray call per sample to a reward actor, and builds no reward actors;
- with one rollout server (and the tail policy off), the agent loops send requests straight to
  it (``sole_server.py``) instead of asking the load-balancer actor twice per sample, in the async
  modes through upstream's partial-rollout client;
- per step, where the sampling phase (``timing_s/gen``) went: each rollout's generation and
  scoring time from the agent loop's own per-sample metrics (``agent_loop/generate_sequences``
  and ``agent_loop/compute_score``, mean and max); the rest of ``gen`` is the replay buffer
  waiting for its next poll and dynamic sampling's refill rounds (benchmarks/embedded_default.py);
- around each profiled step, ``verl_ascend.run.trace_check.TraceCheck`` verifies that every
  trace that was asked for is on disk, and says why not (warning, or error under
  ``profile_check.strict``) -- never silently nothing;
- ``trainer.v1.dapo_ascend.rollout_tail`` (off by default) cuts the rollout long tail:
  over-provisioned groups, stragglers aborted once enough useful groups are complete,
  partial responses carried over (``recipe/dapo_ascend/rollout_tail``). Its ``rollout_tail/*``
  metrics are logged either way.

Structure: ``DAPOAscendHooks(PPOTrainer)`` owns the components as attributes (``rollout_tail``,
``rollout_watchdog``, ``journal``, ``trace_check``), built in its ``__init__`` and called only from
the hook overrides below, each a few lines, each ending in ``super()``: upstream's method of the
mode's class. The three classes at the bottom only name the mode; where a component acts
differently in a mode, the hook says so (``self.MODE``), and what cannot act in a mode is refused
before Ray (``recipe/dapo_ascend/checks.py``).
"""

from __future__ import annotations

import logging
import numbers
import os

import numpy as np
import transfer_queue as tq

from verl_ascend import trainer_mode
from verl_ascend.run.trace_check import TraceCheck
from verl.trainer.ppo.v1.replay_buffer import DAPO_FILTERED_REWARD_COUNTS_KEY
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_ascend.run.data_order import ENV_FRESH_DATA_ORDER, keep_fresh_order
from verl_ascend.run.journal import RunJournal
from verl_ascend.run.watchdog import RolloutFailure, RolloutWatchdog, rollout_servers
from recipe.dapo_ascend import modes
from recipe.dapo_ascend.local_reward import InProcessRewardHandle, check_in_process_reward, release_reward_workers
from recipe.dapo_ascend.options import DapoAscendOptions
from recipe.dapo_ascend.rollout_tail.accounting import consumption_metrics
from recipe.dapo_ascend.rollout_tail.component import RolloutTail
from recipe.dapo_ascend.sole_server import SoleFullyAsyncServerClient, SoleServerClient, sole_server

logger = logging.getLogger(__name__)


def reward_extra_means(extra_fields: list, mask: np.ndarray | None = None) -> dict[str, float]:
    """Mean of every numeric/bool ``reward_extra_info`` entry over the rows kept by ``mask``."""
    values: dict[str, list[float]] = {}
    for i, fields in enumerate(extra_fields):
        if mask is not None and not mask[i]:
            continue
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        for key, value in (info or {}).items():
            # Upstream's dapo manager returns tensors for some entries (overlong_reward).
            if isinstance(value, (bool, np.bool_, numbers.Number)) or getattr(value, "numel", lambda: 0)() == 1:
                values.setdefault(key, []).append(float(value))
    return {f"reward_extra/{key}/mean": float(np.mean(v)) for key, v in values.items() if v}


def sampled_mean(kept_mean: float | None, kept_rows: int, filtered_counts: dict | None, group_size: int) -> float | None:
    """Mean of the filter metric over every response sampled this step, filtered groups included.

    Dynamic sampling drops the groups whose metric is the same for every response (all right or
    all wrong), so the trained batch's mean is biased toward 0.5 by construction: at a policy
    accuracy of 0.95 two groups in three are dropped and the kept ones average ~0.85. Upstream's
    replay buffer reports the dropped groups as ``{shared value: group count}``; adding them
    back gives the accuracy the policy actually sampled at.
    """
    if kept_mean is None:
        return None
    total, rows = kept_mean * kept_rows, kept_rows
    for value, groups in (filtered_counts or {}).items():
        total += float(value) * groups * group_size
        rows += groups * group_size
    return total / rows if rows else None


AGENT_LOOP_TIMINGS = ("generate_sequences", "compute_score")


def agent_loop_timings(sample_metrics: list, mask: np.ndarray | None = None) -> dict[str, float]:
    """Mean and max over the trained samples of the agent loop's per-sample times (seconds)."""
    out = {}
    for name in AGENT_LOOP_TIMINGS:
        values = [
            float(m[name])
            for i, m in enumerate(sample_metrics)
            if (mask is None or mask[i]) and isinstance(m, dict) and m.get(name) is not None
        ]
        if values:
            out[f"agent_loop/{name}/mean"] = float(np.mean(values))
            out[f"agent_loop/{name}/max"] = float(np.max(values))
    return out


class DAPOAscendHooks(PPOTrainer):
    """The recipe's hooks on upstream's trainer, four components, each a plain object it owns:

    - ``rollout_tail``: the long-tail policy (``recipe/dapo_ascend/rollout_tail``; observes only when off);
    - ``rollout_watchdog``: a dead or stalled rollout server fails the step clearly (``verl_ascend/run/watchdog.py``);
    - ``journal``: status.json, prompt ledger, checkpoint markers, appended metrics (``verl_ascend/run/journal.py``);
    - ``trace_check``: every trace asked for is on disk (``verl_ascend/run/trace_check.py``; None unless profiling).

    The hooks below are the only places they are called, in the order written there. ``MODE`` is
    upstream's trainer mode of the concrete class (set by the three classes below).

    Seams (rows in ``recipe/dapo_ascend/seams.py``): upstream offers no public hook for any of this.
    ``recipe_trainer_overrides``: reward/agent-loop/tail metrics in ``_compute_metrics``, the trace check
    around upstream's profiling steps, the profiled step of the CPU ``hf`` servers, the replay buffer's poll
    interval, and a resume on new data that keeps the dataloader's fresh position (``_load_checkpoint``);
    ``recipe_journal_overrides``: the journal around the batch fetch, actor update and checkpoint save;
    ``recipe_tail_trainer_overrides``: the tail policy swaps in its sampler and notes the submitted uids;
    ``recipe_trainer_async_modes``: the async classes lean on upstream's partial-rollout client, its weight
    sync and separate_async's rollout-pool profiling stop in ``on_step_end``, its server managers, its
    ``__init__`` asserts (checked before Ray by ``verl_ascend/checks/rules_async.py``) and
    ``ReplayBufferAsync.sample``, which the watchdog wraps; ``recipe_trainer_mode_sync``: see ``__init__``.
    They go when upstream's trainers take callbacks (composition) for metrics, profile steps,
    batch/update/checkpoint events, the sampler class and submissions, and decide sync/async by class rather
    than by the mode's name.
    """

    MODE = trainer_mode.SYNC

    def __init__(self, config):
        # Upstream's base trainer branches on the mode's name (``== "sync"``: replay buffer, refill
        # rules, checkpoint contents; ``trainer.v1.<mode>``: its settings): it must be this class's.
        if trainer_mode.mode_of(config) != self.MODE:
            raise ValueError(
                f"{trainer_mode.KEY}={trainer_mode.mode_of(config)!r} reached the recipe's {type(self).__name__}, "
                f"which runs {self.MODE!r}: name upstream's mode ({', '.join(trainer_mode.MODES)}) and launch with "
                "the recipe's entry point, whose task runner picks the recipe's class for it")
        # Before upstream's __init__: it builds the replay buffer (our _build_replay_buffer uses
        # both), and the tail writes its router YAML into the config the servers are made from.
        self.options = DapoAscendOptions.from_config(config)  # trainer.v1.dapo_ascend, typed
        self.rollout_tail = RolloutTail(config, lambda: rollout_servers(self))
        self.rollout_watchdog = RolloutWatchdog.from_config(config, lambda: rollout_servers(self))
        if self.options.reward_in_agent_loop:
            check_in_process_reward(config)
            before = release_reward_workers(config)  # upstream builds no reward actors
            logger.info("reward_in_agent_loop: rewards scored in the agent loops (reward.num_workers %s -> 0)", before)
        super().__init__(config)
        self.journal = RunJournal(config)
        self.trace_check = TraceCheck.from_config(config)

    # -- construction ----------------------------------------------------------------------------
    def _build_replay_buffer(self):
        # The one place the replay buffer is shaped. Order: the tail replaces upstream's instance
        # by a subclass instance (TailMeter/TailCuttingSampler, copying its attributes, poll
        # interval included), so it comes before the watchdog, which rebinds ``sample`` and
        # ``_wait_for_next_poll`` on the instance actually used (the tail's sampler calls both).
        # The async modes' ReplayBufferAsync keeps its class: the tail's samplers are synchronous
        # ones (the tail is refused outside sync), so there it measures nothing.
        buffer = super()._build_replay_buffer()
        if self.options.poll_interval_s is not None:
            buffer.poll_interval = self.options.poll_interval_s
        if self.MODE == trainer_mode.SYNC:
            buffer = self.rollout_tail.adopt(buffer)
        self.rollout_watchdog.attach(buffer)
        return buffer

    def get_reward_handles(self):
        if not self.options.reward_in_agent_loop:
            return super().get_reward_handles()
        return [InProcessRewardHandle(self.config)]

    def get_llm_client(self):
        if self.MODE != trainer_mode.SYNC:  # upstream's partial-rollout client (abort, resume on new weights)
            return self._partial_rollout_client()
        client_cls = self.rollout_tail.client_cls()
        if client_cls is not None:
            return self.llm_server_manager.get_client(client_cls=client_cls)
        server = sole_server(self.llm_server_manager, self.config)
        if server is None:
            return super().get_llm_client()
        return self.llm_server_manager.get_client(client_cls=SoleServerClient, server=server)

    def _partial_rollout_client(self):
        """Upstream's partial-rollout client of the mode, without the balancer when one server serves it.

        ``separate_async`` samples from its rollout pool; the trainer's own replicas join the balancer
        only before the first step, or with ``hybrid_rollout.enable_switch`` (then upstream's client).
        """
        manager = getattr(self, "standalone_server_manager", None) or self.llm_server_manager
        switching = self.MODE == trainer_mode.SEPARATE and self.hybrid_rollout_config.enable_switch
        server = None if switching else sole_server(manager, self.config)
        if server is None:
            return super().get_llm_client()
        return manager.get_client(client_cls=SoleFullyAsyncServerClient, server=server)

    def _load_checkpoint(self):
        # The entry point decided, before Ray, that this resume is on new data
        # (fault_tolerance.new_data_order=true, verl_ascend/run/data_order.py): the checkpoint's
        # dataloader position belongs to other rows, so the new data starts in a fresh order.
        if os.environ.get(ENV_FRESH_DATA_ORDER) != "1":
            return super()._load_checkpoint()
        return keep_fresh_order(self.train_dataloader, super()._load_checkpoint)

    # -- the step, in the order upstream calls the hooks ---------------------------------------
    def on_step_begin(self):
        self.journal.step_begin(self.global_steps)  # marks the previous step's checkpoint complete
        return super().on_step_begin()

    def prepare_step(self) -> dict:
        if self.rollout_tail.enabled:
            return {}  # the tail's sampler submits what the step needs, counting groups carried over
        return super().prepare_step()

    def _fetch_one_gen_batch(self):
        batch = super()._fetch_one_gen_batch()
        self.journal.record_prompts(batch, self.global_steps)
        return batch

    def _submit_batch_to_rollout(self, batch):
        count = super()._submit_batch_to_rollout(batch)
        self.rollout_tail.note_submitted(self.replay_buffer, batch)
        return count

    def on_sample_begin(self):
        self.journal.status("rollout", self.global_steps)
        return super().on_sample_begin()

    def _start_rollout_profiling(self) -> None:
        # Tell verl.cpu's hf servers which training step they trace (upstream passes nothing, and
        # a server only knows the version of its weights, one behind the step being sampled).
        # Upstream's own servers (vLLM) hand every keyword to their engine: upstream's call.
        if self.config.actor_rollout_ref.rollout.name != "hf":
            return super()._start_rollout_profiling()
        for manager in self._rollout_server_managers():
            manager.start_profile(profile_step=self.global_steps)

    def _stop_rollout_profiling(self) -> None:
        super()._stop_rollout_profiling()
        if self.trace_check is not None:  # separate_async stops its rollout pool's traces in on_step_end
            self.trace_check.after_rollout_stop(self.global_steps)

    def _start_profiling(self) -> None:
        if self.trace_check is not None:
            self.trace_check.before_step(self.global_steps)
        super()._start_profiling()

    def _stop_profiling(self) -> None:
        step = self.global_steps
        super()._stop_profiling()
        if self.trace_check is not None:
            self.trace_check.after_step(step)

    def _update_actor(self, batch, metrics):
        self.journal.status("update_actor", self.global_steps)
        return super()._update_actor(batch, metrics)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        mask = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "metrics"]
        )
        extra_fields = data.pop("extra_fields").tolist()
        metrics.update(reward_extra_means(extra_fields, mask))
        self._log_sampled_mean(metrics, int(mask.sum()))
        metrics.update(agent_loop_timings(data.pop("metrics").tolist(), mask))
        metrics.update(consumption_metrics(extra_fields, mask, global_steps))

    def _log_sampled_mean(self, metrics: dict, kept_rows: int) -> None:
        """``reward_extra/<filter metric>/sampled_mean``: the filter metric over all sampled responses."""
        name = self.config.algorithm.filter_groups.get("metric")
        if not self.config.algorithm.filter_groups.get("enable", False) or not name:
            return
        value = sampled_mean(
            metrics.get(f"reward_extra/{name}/mean"),
            kept_rows,
            metrics.get(DAPO_FILTERED_REWARD_COUNTS_KEY),
            int(self.config.actor_rollout_ref.rollout.n),
        )
        if value is not None:
            metrics[f"reward_extra/{name}/sampled_mean"] = value

    def _save_checkpoint(self):
        self.journal.before_save(self.global_steps)
        super()._save_checkpoint()
        self.journal.after_save(self.global_steps)  # the marker is written at the next on_step_begin

    def on_step_end(self):
        try:
            result = super().on_step_end()  # pushes the new weights to the rollout servers
            self.rollout_tail.step_ended(self.checkpoint_manager)  # reopen servers the tail's abort closed
            return result
        except RolloutFailure:
            raise
        except Exception as exc:  # a dead server fails here: say so instead of the symptom
            self.rollout_watchdog.explain_step_end_failure(getattr(self, "global_steps", None), exc)
            raise

    def fit(self, *args, **kwargs):
        result = super().fit(*args, **kwargs)
        # Upstream's counter ends one past the last step it trained.
        self.journal.finished(int(getattr(self, "global_steps", 1)) - 1)
        return result


# -- one class per upstream trainer mode: the hooks in front of upstream's class ------------------
@register_trainer(modes.REGISTRY[trainer_mode.SYNC])
class DAPOAscendTrainer(DAPOAscendHooks, PPOTrainerSync):
    """Upstream's ``sync`` mode: rollout, then training, on the same workers."""

    MODE = trainer_mode.SYNC


@register_trainer(modes.REGISTRY[trainer_mode.COLOCATE])
class DAPOAscendColocateAsync(DAPOAscendHooks, PPOTrainerColocateAsync):
    """``colocate_async``: the same workers, partial rollout carried across weight updates."""

    MODE = trainer_mode.COLOCATE


@register_trainer(modes.REGISTRY[trainer_mode.SEPARATE])
class DAPOAscendSeparateAsync(DAPOAscendHooks, PPOTrainerSeparateAsync):
    """``separate_async``: a rollout pool of its own, weights moved by a checkpoint engine."""

    MODE = trainer_mode.SEPARATE
