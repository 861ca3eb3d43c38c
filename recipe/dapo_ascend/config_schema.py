"""The pre-Ray schema: a typed, range-checked view of every key the recipe and its tools read.

Why: OmegaConf keeps whatever the command line gave (``data.train_batch_size=8.5`` is a float,
``optim.lr=fast`` a string, ``rollout.n=0`` an int) and upstream converts or asserts late, inside
Ray actors, or never (``rollout.n=0`` trains on nothing). Each rule here names one of upstream's keys
and what is accepted. Our own sections (``fault_tolerance``, ``profile_check``, ``doctor``,
``trainer.v1.dapo_ascend``) are declared once, next to the code that reads them, and answer for
themselves (``verl_ascend/sections.py``: ``sections.problems``). ``problems(config)`` lists every
violation at once; the ``config_types`` rule (``checks.py``) turns them into findings, so preflight,
``DRY_RUN=1`` and ``verl-ascend doctor`` accept and refuse the same configs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig

from verl_ascend import sections
from verl_ascend.checks.rules_engine import rollout_names  # noqa: F401 (the recipe's view of the registry)
from verl_ascend.sections import (  # the checks the table below uses
    ABSENT,
    show,
    any_int,
    boolean,
    non_negative_int,
    non_negative_number,
    one_of,
    positive_int,
    positive_number,
    probability,
)

RESUME_MODES = ("auto", "disable", "resume_path")


@dataclass(frozen=True)
class Rule:
    key: str
    accepted: str  # what the message says is accepted
    ok: Callable[[Any], bool]
    optional: bool = True  # None / absent is fine


def file_list(v: Any) -> bool:
    items = [v] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple, ListConfig)) else None
    return bool(items) and all(isinstance(i, str) and i.strip() for i in items)


def _rules() -> list[Rule]:
    ar, actor, rollout = "actor_rollout_ref", "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    pint, nnint = "an integer >= 1", "an integer >= 0"
    names = rollout_names()
    return [
        Rule("data.train_files", "a parquet file path or a non-empty list of them", file_list, optional=False),
        Rule("data.val_files", "a parquet file path or a non-empty list of them", file_list),
        Rule("data.train_batch_size", pint, positive_int, optional=False),
        Rule("data.gen_batch_size", pint, positive_int),
        Rule("data.max_prompt_length", pint, positive_int, optional=False),
        Rule("data.max_response_length", pint, positive_int, optional=False),
        Rule("data.dataloader_num_workers", nnint, non_negative_int),
        Rule("data.seed", "an integer", any_int),
        Rule("data.skip_bad_rows", "true or false", boolean),
        Rule(f"{ar}.model.path", "a model folder path", lambda v: isinstance(v, str) and bool(v.strip()), optional=False),
        Rule(f"{actor}.ppo_mini_batch_size", pint, positive_int, optional=False),
        Rule(f"{actor}.ppo_micro_batch_size_per_gpu", pint, positive_int),
        Rule(f"{actor}.ppo_epochs", pint, positive_int),
        Rule(f"{actor}.optim.lr", "a number > 0 (e.g. 1e-6)", positive_number, optional=False),
        Rule(f"{actor}.clip_ratio_low", "a number >= 0", non_negative_number),
        Rule(f"{actor}.clip_ratio_high", "a number >= 0", non_negative_number),
        Rule(f"{rollout}.name", f"one of {names} (upstream's rollout registry)", one_of(names), optional=False),
        Rule(f"{rollout}.n", pint, positive_int, optional=False),
        Rule(f"{rollout}.temperature", "a number > 0", positive_number, optional=False),
        Rule(f"{rollout}.top_p", "a number in (0, 1]", probability),
        Rule(f"{rollout}.gpu_memory_utilization", "a number in (0, 1]", probability),
        Rule(f"{rollout}.tensor_model_parallel_size", pint, positive_int),
        Rule(f"{rollout}.log_prob_micro_batch_size_per_gpu", pint, positive_int),
        Rule(f"{rollout}.val_kwargs.temperature", "a number >= 0", non_negative_number),
        Rule("reward.reward_kwargs.overlong_buffer_cfg.len", nnint, non_negative_int),
        Rule("reward.reward_kwargs.overlong_buffer_cfg.penalty_factor", "a number >= 0", non_negative_number),
        Rule("algorithm.filter_groups.max_num_gen_batches", nnint, non_negative_int),
        Rule("trainer.nnodes", pint, positive_int, optional=False),
        Rule("trainer.n_gpus_per_node", pint, positive_int, optional=False),
        Rule("trainer.total_epochs", pint, positive_int),
        Rule("trainer.total_training_steps", f"{pint} (or null: total_epochs decides)", positive_int),
        Rule("trainer.save_freq", "an integer (> 0: steps between checkpoints)", any_int, optional=False),
        Rule("trainer.test_freq", "an integer", any_int),
        Rule("trainer.max_actor_ckpt_to_keep", pint, positive_int),
        Rule("trainer.resume_mode", f"one of {list(RESUME_MODES)}", one_of(RESUME_MODES), optional=False),
        Rule("trainer.experiment_name", f"a plain folder name of at most {NAME_BYTES} bytes (no '/', not '.' or '..')",
             safe_name, optional=False),
        Rule("trainer.default_local_dir", "a folder path", lambda v: isinstance(v, str) and bool(v.strip()), optional=False),
    ]


# File systems limit one path component to 255 bytes (NAME_MAX on ext4, xfs, NFS); names are
# built from the experiment name with suffixes (upstream's file logger `<name>.jsonl`, atomic
# writes `.tmp.<pid>`), so the name keeps 55 bytes free for them.
NAME_BYTES = 200


def safe_name(v: Any) -> bool:
    """An experiment name is a folder *inside* the output folder: one path component."""
    return (
        isinstance(v, str)
        and bool(v.strip())
        and v not in (".", "..")
        and os.sep not in v
        and "/" not in v
        and "\0" not in v
        and len(v.encode("utf-8", "surrogatepass")) <= NAME_BYTES
    )


def problems(config: DictConfig) -> list[str]:
    """Every key whose value is not accepted: ``key=value: accepted is ...``; our own sections' first."""
    found = sections.problems(config)
    for rule in _rules():
        try:
            value = sections.lookup(config, rule.key)
        except ValueError as exc:
            found.append(str(exc))
            continue
        if value is ABSENT or value is None:
            if not rule.optional:
                found.append(f"{rule.key} is not set; accepted: {rule.accepted}")
            continue
        if not rule.ok(value):
            found.append(f"{rule.key}={show(value)}: accepted: {rule.accepted}")
    return found
