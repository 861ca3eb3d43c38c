"""Trainer side of the policy: ``RolloutTail``, a component of ``recipe.dapo_ascend.trainer.DAPOAscendTrainer``,
which calls it from its hooks:

- ``_build_replay_buffer``: ``adopt`` wraps upstream's buffer in ``TailMeter`` (off) or
  ``TailCuttingSampler`` (on);
- ``get_llm_client``: ``client_cls`` is ``TailAwareClient`` for the agent loops (on);
- ``__init__``: the router YAML for ``balance=outstanding_tokens`` (on, unless the user set a router);
- ``prepare_step``: no fixed batch up front (on): the sampler tops up to its target;
- ``_submit_batch_to_rollout``: ``note_submitted`` tells the sampler which groups went out;
- ``on_step_end``: ``step_ended``, after the new weights are in, reopens the servers closed by the abort, so
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


class RolloutTail:
    """The policy's trainer side; the trainer calls it from its hooks (``recipe/dapo_ascend/trainer.py``)."""

    def __init__(self, config, servers_fn):
        """Built before upstream's trainer ``__init__``: the router YAML must be in the config
        before the rollout servers are made, and the replay buffer (built in upstream's
        ``__init__``) is adopted by ``adopt``. ``servers_fn``: () -> [(label, server handle)]."""
        self.config = config
        self.policy = TailPolicy.from_config(config)
        self._servers_fn = servers_fn
        self._gate_closed = False
        if self.policy.enable:
            write_router_yaml(config, self.policy)

    @property
    def enabled(self) -> bool:
        return bool(self.policy.enable)

    # -- construction ------------------------------------------------------------------------
    def adopt(self, buffer):
        """Upstream's replay buffer as a ``TailMeter`` (policy off) or ``TailCuttingSampler`` (on)."""
        run_dir = os.environ.get(ENV_RUN_DIR)
        ledger = self._ledger(os.path.join(run_dir, LEDGER_FILE)) if run_dir else None
        if not self.policy.enable:
            return TailMeter.adopt(buffer, ledger=ledger)
        data = self.config.data
        dapo = getattr(buffer, "filter_groups_metric", None) is not None
        granularity = 1 if dapo else int(data.get("gen_batch_size", None) or data.train_batch_size)
        return TailCuttingSampler.adopt(
            buffer, ledger=ledger, policy=self.policy, refill_granularity=granularity, abort_fn=self.abort
        )

    @staticmethod
    def _ledger(path: str):
        def record(event: str, step: int, uids: list) -> None:
            append_jsonl(path, {"step": int(step), "event": event, "uids": uids})

        return record

    def client_cls(self):
        """The agent loops' client class: ``TailAwareClient`` with the policy on, else None (upstream's)."""
        return TailAwareClient if self.policy.enable else None

    # -- the step ------------------------------------------------------------------------------
    @staticmethod
    def note_submitted(replay_buffer, batch) -> None:
        note = getattr(replay_buffer, "note_submitted", None)
        if note is not None:
            note([str(u) for u in batch["uid"]])

    def abort(self, reject: bool) -> int:
        handles = [handle for _, handle in self._servers_fn()]
        results = ray.get([h.abort_all_requests.remote(reject_request=reject) for h in handles])
        self._gate_closed = True
        return sum(int((r or {}).get("aborted_count", 0)) for r in results if isinstance(r, dict))

    def step_ended(self, checkpoint_manager) -> None:
        """After the new weights are in the servers: reopen those the abort closed, so the
        carried requests continue with them."""
        if self._gate_closed:
            checkpoint_manager.resume_generation_replicas()
            self._gate_closed = False
