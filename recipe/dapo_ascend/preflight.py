"""The recipe's preflight: the neutral checks of ``verl_ascend.checks.preflight`` plus the recipe's own
(typed keys of ``config_schema``, the rollout-tail policy), in the order the entry point runs them.

Each problem raises ``PreflightError``; the entry point prints it and exits with status 2.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from verl_ascend.checks.preflight import (  # noqa: F401 (the recipe's preflight API)
    PreflightError,
    check_batch_sizes,
    check_data,
    check_model,
    check_upstream_objects,
    run_upstream_validation,
)


def check_types(config: DictConfig) -> None:
    """Every key the recipe reads has the right type and range (``config_schema.py``)."""
    from recipe.dapo_ascend import config_schema

    config_schema.check(config, PreflightError)


def check_rollout_tail(config: DictConfig) -> None:
    """``trainer.v1.dapo_ascend.rollout_tail`` settings are in range (``rollout_tail/policy.py``)."""
    from recipe.dapo_ascend.rollout_tail.policy import TailPolicy, TailPolicyError

    try:
        TailPolicy.from_config(config)
    except (TailPolicyError, TypeError) as exc:
        raise PreflightError(str(exc)) from exc


def check_destination(config: DictConfig) -> None:
    """Checkpoint and run folders writable with room for a checkpoint (``run_guard.py``)."""
    from verl_ascend.run import checkpoints, run_guard

    from verl_ascend.paths import RunPaths

    paths = RunPaths.of(config)
    run_dir, out = paths.run_dir, paths.output_dir
    if os.path.commonpath([out, os.path.abspath(run_dir)]) != out and "VERL_FILE_LOGGER_PATH" not in os.environ:
        raise PreflightError(
            f"trainer.experiment_name={config.trainer.experiment_name!r} puts the run folder at {run_dir!r}, outside "
            f"the output folder {out!r}; accepted: a plain folder name"
        )
    run_guard.check_destination(config, run_dir, PreflightError)


def check_all(config: DictConfig) -> None:
    check_types(config)
    check_upstream_objects(config)
    check_rollout_tail(config)
    check_model(config)
    check_destination(config)
    check_data(config)
    check_batch_sizes(config)
    run_upstream_validation(config)
