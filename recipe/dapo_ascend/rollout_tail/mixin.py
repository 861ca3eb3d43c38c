"""Trainer side of the policy, mixed into ``recipe.dapo_ascend.trainer.DAPOAscendTrainer``.

- ``_build_replay_buffer``: wraps upstream's buffer in ``TailMeter`` (off) or
  ``TailCuttingSampler`` (on);
- ``get_llm_client``: ``TailAwareClient`` for the agent loops (on);
- the router YAML for ``balance=outstanding_tokens`` (on, unless the user set a router);
- ``prepare_step``: no fixed batch up front (on): the sampler tops up to its target;
- ``on_step_end``: after the new weights are in, reopen the servers closed by the abort, so
  the carried requests continue with them;
- ``rollout_groups.jsonl`` in the run directory (``VERL_ASCEND_RUN_DIR``): every prompt
  group's fate per step (submitted, filtered, dropped, trained, carried).
"""

from __future__ import annotations

import os
import tempfile

import ray
from omegaconf import OmegaConf, open_dict

from verl_ascend.run.files import ENV_RUN_DIR, append_jsonl, write_atomic
from recipe.dapo_ascend.rollout_tail.balancer import ROUTER_CLASS
from recipe.dapo_ascend.rollout_tail.client import TailAwareClient
from recipe.dapo_ascend.rollout_tail.policy import TailPolicy
from recipe.dapo_ascend.rollout_tail.sampler import TailCuttingSampler, TailMeter
from verl_ascend.run.watchdog import rollout_servers

LEDGER_FILE = "rollout_groups.jsonl"
ROUTER_FILE = "router.yaml"


def write_router_yaml(config, policy: TailPolicy) -> str | None:
    """Point ``rollout.router_config_path`` at the outstanding-tokens router (returns the path)."""
    rollout = config.actor_rollout_ref.rollout
    if policy.balance != "outstanding_tokens" or rollout.get("router_config_path"):
        return None
    text = OmegaConf.to_yaml(
        {
            "router_class": ROUTER_CLASS,
            "default_max_tokens": int(rollout.response_length),
            "prefill_weight": float(policy.prefill_weight),
        }
    )
    folder = os.environ.get(ENV_RUN_DIR) or None
    if folder:  # next to the run's journal, for inspection
        path = os.path.join(folder, ROUTER_FILE)
        write_atomic(path, text.encode())
    else:
        fd, path = tempfile.mkstemp(prefix="verl-ascend-router-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    with open_dict(rollout):
        rollout.router_config_path = path
    return path


class RolloutTailMixin:
    def __init__(self, config, *args, **kwargs):
        self._tail_policy = TailPolicy.from_config(config)
        self._tail_gate_closed = False
        if self._tail_policy.enable:
            write_router_yaml(config, self._tail_policy)
        super().__init__(config, *args, **kwargs)

    # -- construction ------------------------------------------------------------------------
    def _build_replay_buffer(self):
        buffer = super()._build_replay_buffer()
        run_dir = os.environ.get(ENV_RUN_DIR)
        ledger = self._tail_ledger(os.path.join(run_dir, LEDGER_FILE)) if run_dir else None
        if not self._tail_policy.enable:
            return TailMeter.adopt(buffer, ledger=ledger)
        data = self.config.data
        dapo = getattr(buffer, "filter_groups_metric", None) is not None
        granularity = 1 if dapo else int(data.get("gen_batch_size", None) or data.train_batch_size)
        return TailCuttingSampler.adopt(
            buffer, ledger=ledger, policy=self._tail_policy, refill_granularity=granularity, abort_fn=self._tail_abort
        )

    @staticmethod
    def _tail_ledger(path: str):
        def record(event: str, step: int, uids: list) -> None:
            append_jsonl(path, {"step": int(step), "event": event, "uids": uids})

        return record

    def get_llm_client(self):
        if not self._tail_policy.enable:
            return super().get_llm_client()
        return self.llm_server_manager.get_client(client_cls=TailAwareClient)

    # -- the step ------------------------------------------------------------------------------
    def _submit_batch_to_rollout(self, batch):
        count = super()._submit_batch_to_rollout(batch)
        note = getattr(self.replay_buffer, "note_submitted", None)
        if note is not None:
            note([str(u) for u in batch["uid"]])
        return count

    def prepare_step(self) -> dict:
        if not self._tail_policy.enable:
            return super().prepare_step()
        return {}  # the sampler submits what the step needs, counting groups carried over

    def _tail_abort(self, reject: bool) -> int:
        handles = [handle for _, handle in rollout_servers(self)]
        results = ray.get([h.abort_all_requests.remote(reject_request=reject) for h in handles])
        self._tail_gate_closed = True
        return sum(int((r or {}).get("aborted_count", 0)) for r in results if isinstance(r, dict))

    def on_step_end(self):
        result = super().on_step_end()  # the new weights are in the servers now
        if self._tail_gate_closed:
            self.checkpoint_manager.resume_generation_replicas()
            self._tail_gate_closed = False
        return result
