"""Entry point of the DAPO recipe: ``python -m recipe.dapo_ascend.main_dapo [--config-name N] [overrides]``.

The whole path, in order:
1. Hydra composes ``config/<name>.yaml`` on top of upstream's ``ppo_trainer`` config; every
   upstream-style override works (``data.max_response_length=1234``, ``+foo=bar``).
2. ``DRY_RUN=1``: print the composed config, env profile and the checks' findings and verdict, and exit.
3. ``preflight.prepare``, one call before Ray; ``NoStart`` carries the exit status and the line when
   it stops the start. The run folder, if it exists, is locked first (one live run per folder): a
   second run is refused at once naming the first, before any expensive check. Then the one
   validation pipeline (``verl_ascend.checks.validate``, via ``preflight.check_all``: typed keys,
   upstream's config objects and ``validate_config``, batch arithmetic, rollout-tail policy, the
   doctor's rules, env-profile conflicts, then model, checkpoint destination and data rows) runs in
   this process, before anything in the output folder changes: bad input fails in seconds with every
   culprit named at once, exit status 2. A start that would resume nothing on top of recorded history
   is refused, and only then are the run's files brought in line with the checkpoint it resumes
   (``verl_ascend/run/run_guard.py``, ``verl_ascend/run/checkpoints.py``).
4. A guardian process takes the run lock with it and kills the run's Ray processes if this process
   dies; SIGTERM/SIGINT stop the run at once, exit 128+signal and say how to resume
   (``verl_ascend/run/lifetime.py``). Every Ray start retries Ray's start-up timeout (``cluster.py``).
5. With ``trainer.v1.dapo_ascend.warm_workers`` > 0 this process starts the local Ray cluster
   itself, with workers that import verl ahead of the actors (``verl_ascend/run/warm_workers.py``).
6. Upstream's own ``run_ppo`` with upstream's ``TaskRunnerV1`` trains, with the recipe's trainer for
   the mode in ``trainer.v1.trainer_mode`` (``modes.py``: sync, colocate_async or separate_async,
   upstream's class for it with the recipe's hooks); this process prints a progress line per step
   from the metrics file.

Hydra writes no ``./outputs/<date>/<time>/`` folder (``HYDRA_QUIET``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

import hydra
from omegaconf import DictConfig

from recipe.dapo_ascend.config_utils import CONFIG_DIR
from recipe.dapo_ascend.dry_run import profile_evaluated_once
from recipe.dapo_ascend.preflight import NoStart, prepare
from verl_ascend import envs
from verl_ascend.checks import exits
from verl_ascend.run.checkpoints import export_to_workers
from verl_ascend.paths import RunPaths

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = "dapo_tiny_cpu"


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
        from recipe.dapo_ascend import modes
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
        runner.actor_class = modes.runner(runner.actor_class)  # trains the recipe's class for the user's mode
        cluster.start_ray(lambda: run_ppo(config, task_runner_class=runner), reached=lambda: bool(up))
    except KeyboardInterrupt:
        raise lifetime.stopped(RunPaths.of(config).checkpoints) from None
    finally:
        if printer is not None:
            printer.stop()
        _stop_ray()  # before the driver ends, so the guardian (``lifetime``) finds nothing of the run left


@profile_evaluated_once  # the checks and apply_to_config read one evaluation of the env profile
def main_with_config(config: DictConfig) -> int:
    """The launch on a composed config: the dry run, or ``prepare`` then ``run``; returns the exit status."""
    from verl_ascend.run.lifetime import RunEnded

    try:
        if envs.flag("DRY_RUN"):
            from recipe.dapo_ascend import dry_run

            return int(dry_run.main(config) or exits.OK)
        prepare(config)  # before Ray: refused (2), nothing to train (0) or the run folder failed (1)
    except envs.EnvValueError as exc:  # DRY_RUN, or a switch the dry run reads, unreadable
        return NoStart(exits.REFUSED, str(exc)).report()
    except NoStart as stop:
        return stop.report()
    try:
        run(config)
    except RunEnded as end:  # SIGTERM/SIGINT, or Ray that would not start: the message says what was kept
        print(end.message, file=sys.stderr, flush=True)
        return end.code
    except Exception as exc:
        return report_failure(config, exc)
    return exits.OK


def report_failure(config: DictConfig, exc: BaseException) -> int:
    """The run failed while training: Ray is stopped (no worker's log lands after it), then one last
    line says what happened, what was kept and how to resume (``verl_ascend.run.faults``); a fault
    it cannot name gets its traceback first. Returns the exit status, ``exits.FAILED``."""
    import traceback

    from verl_ascend.run import faults

    _stop_ray()
    try:
        paths = RunPaths.of(config)
        site = faults.RunSite(paths.checkpoints, paths.run_dir, str(config.trainer.get("resume_mode", "auto")))
    except Exception:  # a config without the trainer section (tests): nothing kept to name
        site = faults.RunSite("", "")
    site = dataclasses.replace(site, command=faults.rerun_command())
    line = faults.describe_failure(exc, site)
    if line is None:
        traceback.print_exception(exc, file=sys.stderr)
        line = faults.unnamed_failure(exc, site)
    print(f"[verl-ascend] error: {line}", file=sys.stderr, flush=True)
    return exits.FAILED


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


# An absolute folder: imported by ``verl-ascend train`` (not run as ``__main__``), Hydra would look the relative
# "config" up as package resources of recipe.dapo_ascend.config, a namespace package it cannot read.
@hydra.main(config_path=str(CONFIG_DIR), config_name=DEFAULT_CONFIG, version_base=None)
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


def cli(argv: list[str] | None = None) -> int:
    """``verl-ascend train [--config-name NAME] [overrides...]``: Hydra parses ``argv`` as upstream's main_ppo would."""
    from recipe.dapo_ascend.config_utils import legacy_report

    argv = sys.argv[1:] if argv is None else list(argv)
    report = legacy_report(*_config_name(argv))
    if report:  # Hydra's own error would suggest a '+' prefix: the wrong fix
        print(f"[verl-ascend] config doctor:\n{report}", file=sys.stderr, flush=True)
        return exits.REFUSED
    sys.argv[1:] = hydra_args(argv)
    main()
    return exits.OK


if __name__ == "__main__":
    sys.exit(cli())
