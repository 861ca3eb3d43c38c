"""The recipe's preflight: the one validation pipeline (``verl_ascend.checks.validate``) run on the
composed config with the run's files, before Ray starts and before anything in the output folder changes.

Its rules: the neutral ones of ``verl_ascend.checks`` (upstream's config objects and ``validate_config``,
batch arithmetic, model folder, data rows, the doctor's rules) and those the backends and this recipe
register (``recipe/dapo_ascend/checks.py``: typed keys, rollout-tail policy, checkpoint destination).
Every error (and, under strict, every warning) is named in one ``PreflightError``; the entry point
prints it and exits with status 2. The single checks below stay callable on their own.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf

from verl_ascend import envs

from verl_ascend.checks.preflight import (  # noqa: F401 (the recipe's preflight API)
    PreflightError,
    check_data,
    check_model,
    check_upstream_objects,
    run_upstream_validation,
)

DOCTOR_SWITCH = "VERL_ASCEND_DOCTOR"  # =0: the doctor's advice is skipped at launch (launch checks still run)


def check_types(config: DictConfig) -> None:
    """Every key the recipe reads has the right type and range (``config_schema.py``)."""
    from recipe.dapo_ascend import config_schema

    config_schema.check(config, PreflightError)


def check_destination(config: DictConfig) -> None:
    """Checkpoint and run folders writable with room for a checkpoint (``run_guard.py``)."""
    from verl_ascend.run import checkpoints, run_guard

    from verl_ascend.paths import RunPaths

    paths = RunPaths.of(config)
    run_dir, out = paths.run_dir, paths.output_dir
    if os.path.commonpath([out, os.path.abspath(run_dir)]) != out:
        raise PreflightError(
            f"trainer.experiment_name={config.trainer.experiment_name!r} puts the run folder at {run_dir!r}, outside "
            f"the output folder {out!r}; accepted: a plain folder name"
        )
    run_guard.check_destination(config, run_dir, PreflightError)
    if paths.metrics and os.path.exists(paths.metrics) and not os.path.isfile(paths.metrics):
        # A device or a FIFO (/dev/full, /dev/zero) is read back at resume and by the progress line: endless.
        raise PreflightError(f"VERL_FILE_LOGGER_PATH={paths.metrics!r} is not a regular file; accepted: a file path")
    if paths.metrics and os.path.dirname(paths.metrics) != run_dir:  # VERL_FILE_LOGGER_PATH elsewhere
        run_guard.check_writable(os.path.dirname(paths.metrics), PreflightError, "VERL_FILE_LOGGER_PATH")


def strict_of(config: DictConfig, environ=None) -> bool:
    """Warnings refuse too: ``doctor.strict`` in the config or ``VERL_ASCEND_DOCTOR_STRICT=1``."""
    from verl_ascend import checks

    return checks.strict_from_env(environ) or bool(OmegaConf.select(config, "doctor.strict", default=False))


def findings(config: DictConfig, environ=None, *, inputs: bool = True):
    """Every finding of the pipeline for this config (with the run's files when ``inputs``)."""
    from verl_ascend import checks

    environ = dict(os.environ if environ is None else environ)
    advice = envs.flag(DOCTOR_SWITCH, environ)
    return checks.validate(config, environ, inputs=inputs, advice=advice)


def check_all(config: DictConfig, environ=None) -> list:
    """Run the pipeline with the run's files; raise ``PreflightError`` naming every blocking finding."""
    from verl_ascend import checks

    found = findings(config, environ)
    refused = checks.refusal(found, strict_of(config, environ))
    if refused is not None:
        raise PreflightError(str(refused))
    return found
