"""The run machinery's config section ``fault_tolerance``, declared once (``verl_ascend/sections.py``).

Read by the watchdog in the trainer process and by the run guard in the driver; both build this
dataclass from the config instead of selecting keys one by one. Each key's default, type and accepted
range are written here only: the pre-Ray schema, the YAML test and the docs' key table derive from it.
Booleans go through the distribution's one parser (``verl_ascend.envs.parse_bool``), so
``start_over: "no"`` means no, and an unreadable value names the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_ascend.sections import Section, boolean, key, non_negative_number, positive_number

TF = "true or false"


@dataclass(frozen=True)
class FaultTolerance(Section):
    """``fault_tolerance.*``: when a rollout counts as failed, and what a start may overwrite."""

    SECTION = "fault_tolerance"

    # No rollout progress for this long fails the step; 0 = off.
    rollout_timeout_s: float = key(1800.0, "a number >= 0 (seconds; 0: off, wait forever)", non_negative_number)
    # A ping unanswered this long marks a server unresponsive.
    server_ping_timeout_s: float = key(60.0, "a number > 0 (seconds)", positive_number)
    allow_no_checkpoints: bool = key(False, TF, boolean)  # trainer.save_freq <= 0 is refused unless true
    start_over: bool = key(False, TF, boolean)  # a start resuming nothing on top of earlier records: refused unless true
    check_free_space: bool = key(True, TF, boolean)  # refuse a checkpoint folder without room for one checkpoint
    new_data_order: bool = key(False, TF, boolean)  # resume on changed training data: a fresh data order (else refused)
