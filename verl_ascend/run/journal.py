"""The run journal, a component of the recipe's trainer: checkpoint completion markers, the prompt ledger, ``status.json``.

A plain class: the trainer that owns it (any trainer derived from upstream's ``PPOTrainerSync``)
calls it from its own hooks -- ``step_begin`` from ``on_step_begin``, ``status`` from
``on_sample_begin`` and ``_update_actor``, ``record_prompts`` after ``_fetch_one_gen_batch``,
``before_save``/``after_save`` around ``_save_checkpoint``, ``finished`` after ``fit``. Nothing in
it is specific to one algorithm, and it imports neither the recipe nor a backend. See
``checkpoints`` for why.
"""

from __future__ import annotations

import json
import os
import time
from typing import Optional

from verl_ascend import trainer_mode
from verl_ascend.run.checkpoints import MODE_FIELD, remove_marker, write_marker
from verl_ascend.run.files import ENV_RUN_DIR, PROMPTS_FILE, STATUS_FILE, append_jsonl, write_atomic
from verl_ascend.seams import install


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


class RunJournal:
    """What a run leaves on disk so that it can be followed and resumed.

    - marks a checkpoint complete once its files are written and its step's metrics logged;
    - appends the ``index`` of every prompt taken from the dataloader to ``prompts.jsonl``;
    - keeps ``status.json`` (step, phase) current;
    - installs the ``trainer``-stage seam rows (metrics appended instead of truncated: ``file_logger_append``).

    Writes nothing but the markers and the metrics patch when ``VERL_ASCEND_RUN_DIR`` is unset.
    """

    def __init__(self, config, run_dir: Optional[str] = None):
        self.config = config
        self.run_dir = run_dir or os.environ.get(ENV_RUN_DIR) or None
        self._pending_marker: Optional[tuple[str, int]] = None
        install("trainer")  # once per process: the trainer builds its journal in the TaskRunner

    # -- status and prompt ledger ------------------------------------------------------------
    def status(self, phase: str, step: int) -> None:
        if not self.run_dir:
            return
        status = {"step": int(step), "phase": phase, "pid": os.getpid(), "time": time.time()}
        write_atomic(os.path.join(self.run_dir, STATUS_FILE), json.dumps(status).encode())  # RunFileError stops the run

    def record_prompts(self, batch, step: int) -> None:
        """One ``prompts.jsonl`` line per chunk taken from the dataloader."""
        if self.run_dir:
            index = batch.get("index", None) if hasattr(batch, "get") else None
            append_jsonl(os.path.join(self.run_dir, PROMPTS_FILE), {"step": int(step), "index": _ints(index)})

    # -- checkpoints ---------------------------------------------------------------------------
    def _folder(self, step: int) -> str:
        return os.path.join(self.config.trainer.default_local_dir, f"global_step_{step}")

    def before_save(self, step: int) -> None:
        self.status("save_checkpoint", step)
        # Saving into a folder that already exists (a rolled-back tracker) must not leave its old
        # marker vouching for files being rewritten.
        remove_marker(self._folder(step))

    def after_save(self, step: int) -> None:
        if self.config.actor_rollout_ref.actor.get("checkpoint", {}).get("async_save", False):
            return  # upstream writes no tracker either: nothing is known to be complete
        self._pending_marker = (self._folder(step), int(step))

    def commit_checkpoint(self) -> None:
        """Called once the step that saved the checkpoint has logged its metrics."""
        if self._pending_marker is None:
            return
        folder, step = self._pending_marker
        self._pending_marker = None
        write_marker(folder, step, {MODE_FIELD: trainer_mode.mode_of(self.config)})  # read back before Ray

    # -- the step and the run ------------------------------------------------------------------
    def step_begin(self, step: int) -> None:
        """The previous step's metrics are logged: its checkpoint (if any) is complete."""
        self.commit_checkpoint()
        self.status("step_begin", step)

    def finished(self, last_step: int) -> None:
        self.commit_checkpoint()
        self.status("finished", last_step)
