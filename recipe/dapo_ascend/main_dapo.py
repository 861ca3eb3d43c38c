"""Entry point of the DAPO recipe: ``python -m recipe.dapo_ascend.main_dapo [--config-name N] [overrides]``.

The whole path, in order:
1. Hydra composes ``config/<name>.yaml`` on top of upstream's ``ppo_trainer`` config; every
   upstream-style override works (``data.max_response_length=1234``, ``+foo=bar``).
2. ``DRY_RUN=1``: print the composed config, env profile and the checks' findings and verdict, and exit.
3. The run folder, if it exists, is locked first (one live run per folder): a second run is refused
   at once naming the first, before any expensive check.
4. The one validation pipeline (``verl_ascend.checks.validate``, via ``preflight.check_all``: typed
   keys, upstream's config objects and ``validate_config``, batch arithmetic, rollout-tail policy,
   the doctor's rules, env-profile conflicts, then model, checkpoint destination and data rows) runs
   in this process, before Ray starts and before anything in the output folder changes: bad input
   fails in seconds with every culprit named at once, exit status 2.
5. A start that would resume nothing on top of recorded history is refused, and only then are the
   run's files brought in line with the checkpoint it resumes (``verl_ascend/run/run_guard.py``,
   ``verl_ascend/run/checkpoints.py``).
6. A guardian process takes the run lock with it and kills the run's Ray processes if this process
   dies; SIGTERM/SIGINT stop the run at once, exit 128+signal and say how to resume
   (``verl_ascend/run/lifetime.py``). Every Ray start retries Ray's start-up timeout (``cluster.py``).
7. With ``trainer.v1.dapo_ascend.warm_workers`` > 0 this process starts the local Ray cluster
   itself, with workers that import verl ahead of the actors (``verl_ascend/run/warm_workers.py``).
8. Upstream's own ``run_ppo`` with upstream's ``TaskRunnerV1`` trains; this process prints a
   progress line per step from the metrics file.

Hydra writes no ``./outputs/<date>/<time>/`` folder (``HYDRA_QUIET``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
from typing import Optional

import hydra
from omegaconf import DictConfig

from recipe.dapo_ascend.dry_run import profile_evaluated_once
from verl_ascend import envs
from verl_ascend.run.checkpoints import export_to_workers
from verl_ascend.paths import RunPaths

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = "dapo_tiny_cpu"


def prepare(config: DictConfig) -> None:
    """Everything that must happen in the driver before Ray starts; raises PreflightError.

    Order matters: every check that can refuse the start runs before anything in the output
    folder changes, so a refused start leaves an existing run's history byte for byte intact.
    """
    from omegaconf.errors import OmegaConfBaseException
    from verl.utils.device import auto_set_device

    from recipe.dapo_ascend import preflight
    from verl_ascend.run import checkpoints, cluster, data_order, files, run_guard
    from verl_ascend.run.options import FaultTolerance

    auto_set_device(config)
    # First of all (cheap): this process owns the existing run folders; a second run stops here,
    # at once, not after the checks (30-150 s on a busy machine). Locking creates nothing.
    try:
        folders = list(checkpoints.run_paths(config))
    except OmegaConfBaseException:  # a missing or broken path key: the checks below name it
        folders = []
    run_guard.RunLock.acquire(folders, preflight.PreflightError)
    if not envs.flag(preflight.DOCTOR_SWITCH):
        logger.warning("VERL_ASCEND_DOCTOR=0: the config doctor's advice is skipped (launch checks still run)")
    preflight.check_all(config)
    cluster.adapt_ray_init(config)  # an existing cluster (ray start): connect, don't size one
    folders = list(checkpoints.run_paths(config))
    plan = checkpoints.plan_resume(config, preflight.PreflightError)
    start_over = run_guard.guard_history(
        config, plan.run_dir, plan.step, plan.why, files.HISTORY_FILES, preflight.PreflightError
    )
    run_guard.check_nothing_left(config, plan.step)
    plan.data_order = data_order.plan_data_order(  # the resumed checkpoint's data, or a refusal
        config, plan.step, plan.run_dir, FaultTolerance.from_config(config).new_data_order, preflight.PreflightError
    )
    # Committed to start: only now may files in the output folder change.
    run_guard.RunLock.acquire(folders, preflight.PreflightError, create=True)
    run_guard.RunLock.record_owner(plan.run_dir)
    if start_over:
        print(f"[verl-ascend] fault_tolerance.start_over=true: {plan.why}; earlier records go to dated side files", flush=True)
    checkpoints.prepare_run(config, plan)  # checkpoint picked; metrics/prompt logs continue


EXTERNAL_MODULE = "recipe.dapo_ascend.register"


def run(config: DictConfig) -> None:
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    from verl_ascend.run.progress import ProgressPrinter

    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if EXTERNAL_MODULE not in modules:
        modules.append(EXTERNAL_MODULE)
    export_to_workers(config, {"VERL_USE_EXTERNAL_MODULES": ",".join(modules)})
    if config.trainer.device == "npu":
        # The resolved NPU runtime-env profile, into every Ray worker and rollout server.
        from verl.ascend.env.profile import apply_to_config

        apply_to_config(config)

    loggers = config.trainer.get("logger", []) or []
    printer = None
    if "file" in loggers:
        path = os.environ.setdefault("VERL_FILE_LOGGER_PATH", RunPaths.of(config).default_metrics)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        print(f"[verl-ascend] metrics: {path}", flush=True)
        printer = ProgressPrinter(path, total_steps=config.trainer.get("total_training_steps")).start()
    try:
        from recipe.dapo_ascend.options import DapoAscendOptions
        from verl_ascend.run import cluster, lifetime, warm_workers
        from verl_ascend.run.run_guard import RunLock

        # Before Ray: a guardian holding the run lock takes the run down if this process dies.
        lifetime.Guardian.start(RunLock.held, RunPaths.of(config).checkpoints)
        lifetime.install_stop_handlers()
        # Before run_ppo: Ray started here, with warm workers, or (0, the default) by upstream.
        warm_workers.start(config, DapoAscendOptions.from_config(config).warm_workers)
        up = []  # run_ppo's ray.init succeeded: from then on no failure is a start-up timeout
        runner = lifetime.after_ray_init(TaskRunnerV1, lambda: (up.append(True), lifetime.install_stop_handlers()))
        cluster.start_ray(lambda: run_ppo(config, task_runner_class=runner), reached=lambda: bool(up))
    except KeyboardInterrupt:
        raise lifetime.stopped(RunPaths.of(config).checkpoints) from None
    finally:
        if printer is not None:
            printer.stop()
        _stop_ray()  # before the driver ends, so the guardian (``lifetime``) finds nothing of the run left


@profile_evaluated_once  # the checks and apply_to_config read one evaluation of the env profile
def main_with_config(config: DictConfig) -> int:
    from recipe.dapo_ascend.preflight import PreflightError

    from verl_ascend.run.files import RunFileError
    from verl_ascend.run.lifetime import RunEnded
    from verl_ascend.run.run_guard import NothingToTrain

    try:
        if envs.flag("DRY_RUN"):
            from recipe.dapo_ascend import dry_run

            return int(dry_run.main(config) or 0)
        prepare(config)
    except NothingToTrain as exc:
        print(f"[verl-ascend] {exc}", flush=True)
        return 0
    except (PreflightError, envs.EnvValueError) as exc:
        print(f"[verl-ascend] error: {exc}", file=sys.stderr, flush=True)
        return 2
    except RunFileError as exc:  # the run folder stopped taking writes while it was being prepared
        print(f"[verl-ascend] error: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        run(config)
    except RunEnded as end:  # SIGTERM/SIGINT, or Ray that would not start: the message says what was kept
        print(end.message, file=sys.stderr, flush=True)
        return end.code
    except Exception as exc:
        return report_failure(config, exc)
    return 0


def report_failure(config: DictConfig, exc: BaseException) -> int:
    """The run failed while training: Ray is stopped (no worker's log lands after it), then one last
    line says what happened, what was kept and how to resume (``verl_ascend.run.faults``); a fault
    it cannot name gets its traceback first. Returns the exit status, 1."""
    import traceback

    from verl_ascend.run import faults

    _stop_ray()
    try:
        paths = RunPaths.of(config)
        site = faults.RunSite(paths.checkpoints, paths.run_dir, str(config.trainer.get("resume_mode", "auto")))
    except Exception:  # a config without the trainer section (tests): nothing kept to name
        site = faults.RunSite("", "")
    site = dataclasses.replace(site, command=launch_command())
    line = faults.describe_failure(exc, site)
    if line is None:
        traceback.print_exception(exc, file=sys.stderr)
        line = faults.unnamed_failure(exc, site)
    print(f"[verl-ascend] error: {line}", file=sys.stderr, flush=True)
    return 1


def _stop_ray() -> None:
    """Shut the driver's Ray down: before it ends, so the guardian (``lifetime``) finds nothing of the run left,
    and before the last line: its log monitor keeps streaming the workers' output
    until then, so the error would otherwise scroll away under their lines (found by scripts/fault_harness.py)."""
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception as exc:  # a cluster already gone must not hide the fault being reported
        logger.debug("ray.shutdown after a failed run: %s", exc)


_LAUNCH_ARGS: Optional[list[str]] = None  # the user's arguments, set by cli()


def launch_command() -> Optional[str]:
    """The command line that started this run (None when not started through ``cli``)."""
    if _LAUNCH_ARGS is None:
        return None
    return shlex.join(["python", "-m", "recipe.dapo_ascend.main_dapo", *_LAUNCH_ARGS])


@hydra.main(config_path="config", config_name=DEFAULT_CONFIG, version_base=None)
def main(config: DictConfig) -> None:
    code = main_with_config(config)
    if code:
        sys.exit(code)


# Hydra's own files: a run folder ./outputs/<date>/<time>/ with .hydra/ and a log file, written on
# every start -- also by one the preflight then refuses. The run's real outputs live under
# $VERL_ASCEND_OUTPUT_DIR; the composed config is printed by DRY_RUN=1 and logged by upstream.
HYDRA_QUIET = {
    "hydra.run.dir": "hydra.run.dir=.",
    "hydra.output_subdir": "hydra.output_subdir=null",
    "hydra/job_logging": "hydra/job_logging=stdout",
}


def hydra_args(argv: list[str]) -> list[str]:
    """``argv`` plus the overrides that keep Hydra from writing files, unless the user set them."""
    given = {arg.lstrip("+~").split("=", 1)[0] for arg in argv}
    return argv + [override for key, override in HYDRA_QUIET.items() if key not in given]


def _config_name(argv: list[str]) -> tuple[str, list[str]]:
    """``--config-name NAME`` (or ``--config-name=NAME``, ``-cn``) and the Hydra overrides of ``argv``."""
    name, overrides, args = DEFAULT_CONFIG, [], iter(argv)
    for arg in args:
        flag, _, value = arg.partition("=")
        if flag in ("--config-name", "-cn"):
            name = value or next(args, DEFAULT_CONFIG)
        elif flag in ("--config-path", "-cp", "--config-dir", "-cd") and not value:
            next(args, None)  # Hydra's own flags and their values are not overrides
        elif not arg.startswith("-") and not arg.startswith(("hydra.", "hydra/")):
            overrides.append(arg)
    return name, overrides


def cli() -> None:
    from recipe.dapo_ascend.config_utils import legacy_report

    global _LAUNCH_ARGS
    _LAUNCH_ARGS = list(sys.argv[1:])
    report = legacy_report(*_config_name(sys.argv[1:]))
    if report:  # Hydra's own error would suggest a '+' prefix: the wrong fix
        print(f"[verl-ascend] config doctor:\n{report}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.argv[1:] = hydra_args(sys.argv[1:])
    main()


if __name__ == "__main__":
    cli()
