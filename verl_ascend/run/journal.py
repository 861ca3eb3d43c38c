"""The run journal, mixed into a trainer: checkpoint completion markers, the prompt ledger, ``status.json``.

Works with any trainer derived from upstream's ``PPOTrainerSync`` (it overrides ``_fetch_one_gen_batch``,
``on_sample_begin``, ``_update_actor``, ``_save_checkpoint``, ``on_step_begin`` and ``fit``, calling
``super()`` in each); nothing in it is specific to one algorithm. See ``checkpoints`` for why.
"""

from __future__ import annotations

import json
import os
import time
from typing import Optional

from verl_ascend.run.checkpoints import remove_marker, write_marker
from verl_ascend.run.files import ENV_RUN_DIR, PROMPTS_FILE, STATUS_FILE, append_jsonl, write_atomic
from verl_ascend.run.metrics_append import install_metrics_append


def _ints(value) -> list:
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    elif hasattr(value, "data") and not isinstance(value, (list, tuple)):
        value = value.data
    if not isinstance(value, (list, tuple)):
        value = [value]
    out = []
    for v in value:
        v = getattr(v, "data", v)
        try:
            out.append(int(v))
        except (TypeError, ValueError):
            out.append(str(v))
    return out


class CheckpointJournalMixin:
    """Mixed into the recipe's trainer (before upstream's trainer class in the bases).

    - marks a checkpoint complete once its files are written and its step's metrics logged;
    - appends the ``index`` of every prompt taken from the dataloader to ``prompts.jsonl``;
    - keeps ``status.json`` (step, phase) current;
    - appends metrics instead of truncating them (``install_metrics_append``).
    """

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        self._journal_dir = os.environ.get(ENV_RUN_DIR) or None
        self._pending_marker: Optional[tuple[str, int]] = None
        install_metrics_append()

    # -- status and prompt ledger ------------------------------------------------------------
    def _journal_status(self, phase: str, step: Optional[int] = None) -> None:
        if not self._journal_dir:
            return
        step = int(getattr(self, "global_steps", 0)) if step is None else step
        status = {"step": step, "phase": phase, "pid": os.getpid(), "time": time.time()}
        try:
            write_atomic(os.path.join(self._journal_dir, STATUS_FILE), json.dumps(status).encode())
        except OSError:
            pass

    def _fetch_one_gen_batch(self):
        batch = super()._fetch_one_gen_batch()
        if self._journal_dir:
            index = batch.get("index", None) if hasattr(batch, "get") else None
            append_jsonl(
                os.path.join(self._journal_dir, PROMPTS_FILE),
                {"step": int(self.global_steps), "index": _ints(index)},
            )
        return batch

    def on_sample_begin(self):
        self._journal_status("rollout")
        return super().on_sample_begin()

    def _update_actor(self, batch, metrics):
        self._journal_status("update_actor")
        return super()._update_actor(batch, metrics)

    # -- checkpoints ---------------------------------------------------------------------------
    def _save_checkpoint(self):
        self._journal_status("save_checkpoint")
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        # Saving into a folder that already exists (a rolled-back tracker) must not leave its old
        # marker vouching for files being rewritten.
        remove_marker(folder)
        super()._save_checkpoint()
        if self.config.actor_rollout_ref.actor.get("checkpoint", {}).get("async_save", False):
            return  # upstream writes no tracker either: nothing is known to be complete
        self._pending_marker = (folder, int(self.global_steps))

    def _commit_checkpoint(self) -> None:
        """Called once the step that saved the checkpoint has logged its metrics."""
        if self._pending_marker is None:
            return
        folder, step = self._pending_marker
        self._pending_marker = None
        write_marker(folder, step)

    def on_step_begin(self):
        self._commit_checkpoint()
        self._journal_status("step_begin")
        return super().on_step_begin()

    def fit(self, *args, **kwargs):
        result = super().fit(*args, **kwargs)
        self._commit_checkpoint()
        # Upstream's counter ends one past the last step it trained.
        self._journal_status("finished", step=int(getattr(self, "global_steps", 1)) - 1)
        return result
