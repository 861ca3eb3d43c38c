"""The recipe's preflight: everything the driver does before Ray starts, behind one call, ``prepare``.

``prepare(config)`` locks the run's existing folders, runs the one validation pipeline
(``verl_ascend.checks.validate``) on the composed config with the run's files, decides what the start
resumes, and only then brings the run's files in line with it. It raises one error, ``NoStart``,
carrying the exit status and the line to print (``verl_ascend.checks.exits``): 2 for a refusal (every
blocking finding named at once), 0 when the run has nothing left to train, 1 when the run folder
stopped taking writes. A stopped start has changed nothing on disk and holds no lock.

The pipeline's rules: the neutral ones of ``verl_ascend.checks`` (upstream's config objects and
``validate_config``, batch arithmetic, model folder, data rows, the doctor's rules) and those the
backends and this recipe register (``recipe/dapo_ascend/checks.py``: typed keys, rollout-tail policy,
checkpoint destination). The single checks below stay callable on their own.
"""

from __future__ import annotations

import logging
import os

from omegaconf import DictConfig, OmegaConf

from verl_ascend import envs
from verl_ascend.checks import exits

from verl_ascend.checks.preflight import (  # noqa: F401 (the recipe's preflight API)
    PreflightError,
    check_data,
    check_model,
    check_upstream_objects,
    run_upstream_validation,
)

logger = logging.getLogger(__name__)

DOCTOR_SWITCH = "VERL_ASCEND_DOCTOR"  # =0: the doctor's advice is skipped at launch (launch checks still run)


def check_destination(config: DictConfig) -> None:
    """Checkpoint and run folders writable with room for a checkpoint (``run_guard.py``); raises ``StartRefused``."""
    from verl_ascend.paths import RunPaths
    from verl_ascend.run import run_guard
    from verl_ascend.run.run_guard import StartRefused

    paths = RunPaths.of(config)
    run_dir, out = paths.run_dir, paths.output_dir
    if os.path.commonpath([out, os.path.abspath(run_dir)]) != out:
        raise StartRefused(
            f"trainer.experiment_name={config.trainer.experiment_name!r} puts the run folder at {run_dir!r}, outside "
            f"the output folder {out!r}; accepted: a plain folder name"
        )
    run_guard.check_destination(config, run_dir)
    if paths.metrics and os.path.exists(paths.metrics) and not os.path.isfile(paths.metrics):
        # A device or a FIFO (/dev/full, /dev/zero) is read back at resume and by the progress line: endless.
        raise StartRefused(f"VERL_FILE_LOGGER_PATH={paths.metrics!r} is not a regular file; accepted: a file path")
    if paths.metrics and os.path.dirname(paths.metrics) != run_dir:  # VERL_FILE_LOGGER_PATH elsewhere
        run_guard.check_writable(os.path.dirname(paths.metrics), "VERL_FILE_LOGGER_PATH")


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
    refused = checks.refusal(found, checks.strict_of(config, environ))
    if refused is not None:
        raise PreflightError(str(refused))
    return found


# ----------------------------------------------------------------------------- the one call
class NoStart(Exception):
    """``prepare`` stopped the start: ``code`` is the exit status (``exits``), the message what to say."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code

    def report(self) -> int:
        """Print the one line (stderr for a refusal or failure, stdout for nothing to train); the exit status."""
        import sys

        if self.code == exits.OK:
            print(f"[verl-ascend] {self}", flush=True)
        else:
            print(f"[verl-ascend] error: {self}", file=sys.stderr, flush=True)
        return self.code


def prepare(config: DictConfig) -> None:
    """Everything that must happen in the driver before Ray starts; raises ``NoStart``.

    Order matters: every check that can refuse the start runs before anything in the output
    folder changes, so a refused start leaves an existing run's history byte for byte intact.
    """
    from verl_ascend.run.files import RunFileError
    from verl_ascend.run.run_guard import NothingToTrain, RunLock, StartRefused

    taken: list[str] = []  # the folders this call locked: kept by a committed start, released otherwise
    try:
        _prepare(config, taken)
        taken.clear()
    except NothingToTrain as exc:
        raise NoStart(exits.OK, str(exc)) from None
    except (PreflightError, StartRefused, envs.EnvValueError) as exc:
        raise NoStart(exits.REFUSED, str(exc)) from None
    except RunFileError as exc:  # the run folder stopped taking writes while it was being prepared
        raise NoStart(exits.FAILED, str(exc)) from None
    finally:
        RunLock.release(taken)


def platform_defaults(config: DictConfig) -> list[str]:
    """What the CPU platform fills in for the run's trainer mode, unless the user set it: the gloo
    weight-sync engine and a rollout pool in ``separate_async``, the Ray slots for both pools
    (``verl/cpu/config_defaults.py``, each change logged). Upstream's ``main_ppo`` gets the same
    through the CPU backend's ``auto_set_device`` hook; the checks then judge what will run."""
    if OmegaConf.select(config, "trainer.device") != "cpu":
        return []
    from verl.cpu import config_defaults

    try:
        return config_defaults.apply(config)
    except config_defaults.CPUConfigError as exc:
        raise PreflightError(str(exc)) from None


def _prepare(config: DictConfig, taken: list[str]) -> None:
    from omegaconf.errors import OmegaConfBaseException
    from verl.utils.device import auto_set_device

    from verl_ascend.run import checkpoints, cluster, data_order, files, run_guard
    from verl_ascend.run.options import FaultTolerance
    from verl_ascend.run.run_guard import RunLock

    auto_set_device(config)
    platform_defaults(config)
    # First of all (cheap): this process owns the existing run folders; a second run stops here,
    # at once, not after the checks (30-150 s on a busy machine). Locking creates nothing.
    try:
        folders = list(checkpoints.run_paths(config))
    except OmegaConfBaseException:  # a missing or broken path key: the checks below name it
        folders = []
    taken += RunLock.acquire(folders)
    if not envs.flag(DOCTOR_SWITCH):
        logger.warning("VERL_ASCEND_DOCTOR=0: the config doctor's advice is skipped (launch checks still run)")
    check_all(config)
    cluster.adapt_ray_init(config)  # an existing cluster (ray start): connect, don't size one
    folders = list(checkpoints.run_paths(config))
    plan = checkpoints.plan_resume(config)
    start_over = run_guard.guard_history(config, plan.run_dir, plan.step, plan.why, files.HISTORY_FILES)
    run_guard.check_nothing_left(config, plan.step)
    plan.data_order = data_order.plan_data_order(  # the resumed checkpoint's data, or a refusal
        config, plan.step, plan.run_dir, FaultTolerance.from_config(config).new_data_order
    )
    # Committed to start: only now may files in the output folder change.
    taken += RunLock.acquire(folders, create=True)
    RunLock.record_owner(plan.run_dir)
    if start_over:
        print(f"[verl-ascend] fault_tolerance.start_over=true: {plan.why}; earlier records go to dated side files", flush=True)
    checkpoints.prepare_run(config, plan)  # checkpoint picked; metrics/prompt logs continue
