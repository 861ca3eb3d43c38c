"""The launch protocol, one call: ``launch(recipe, config) -> exit status``.

Why one toolkit call: the steps between a composed config and upstream's ``run_ppo`` are the same for
every recipe, and their order is what keeps a refused start harmless. A recipe declares what is its
own (``recipe.py``: config folder, default config, the module upstream loads in every process, its
trainer registry) and calls :func:`launch`; each backend prepares the config for its own device on
its platform class (``verl_ascend.device.DeviceHooks``, looked up in upstream's ``PlatformRegistry`` by
``trainer.device``: vllm-ascend's ``check_and_update_config`` shape), so no recipe names a backend.

The steps, in order (``DRY_RUN=1``: :mod:`verl_ascend.launch.commands` prints and judges instead):

1. prepare, before Ray (after upstream's ``auto_set_device``): the device platform's ``prepare_config``; the
   existing run folders locked (a second run stops at once); the one validation pipeline (every
   culprit named, exit 2); the resume plan (nothing to train: exit 0); the platform's
   ``deliver_config``; only then the run's files brought in line (exit 1 when the run
   folder stops taking writes). A stopped start changed nothing on disk and holds no lock.
2. start: the module upstream loads in every process, progress line, a guardian holding the run lock, SIGTERM/SIGINT handlers, warm workers, the
   recipe's trainer for the mode, Ray (start-up timeouts retried), upstream's ``run_ppo``.
3. a failure while training: Ray stopped first, then one line naming the fault and how to resume.
"""

from __future__ import annotations

import logging
import os
import sys

from omegaconf import DictConfig

from verl_ascend import envs, trainer_mode
from verl_ascend.checks import exits
from verl_ascend.device import DeviceHooks, device_hooks
from verl_ascend.launch.recipe import Recipe, registered_recipe

__all__ = ["Recipe", "launch", "registered_recipe", "train"]

logger = logging.getLogger(__name__)

DOCTOR_SWITCH = "VERL_ASCEND_DOCTOR"  # =0: the doctor's advice is skipped at launch (launch checks still run)


# ----------------------------------------------------------------------------- the one call
def launch(recipe: Recipe, config: DictConfig) -> int:
    """The launch on a composed config: the dry run, or prepare then start; returns the exit status."""
    from verl.utils.device import auto_set_device

    from verl_ascend.run import faults
    from verl_ascend.run.lifetime import RunEnded

    faults.remember_environment()  # before prepare exports our own variables: the rerun command names the user's
    try:
        if envs.flag("DRY_RUN"):
            from verl_ascend.launch import commands

            return commands.dry_run(config)
        auto_set_device(config)  # upstream's: the detected accelerator wins over trainer.device
        device = device_hooks(_device(config))
        with device.evaluated_once():  # the checks and deliver_config read one evaluation
            prepare(recipe, config, device)
    except envs.EnvValueError as exc:  # DRY_RUN, or a switch the checks read, unreadable
        return NoStart(exits.REFUSED, str(exc)).report()
    except NoStart as stop:
        return stop.report()
    try:
        start(recipe, config)
    except RunEnded as end:  # SIGTERM/SIGINT, or Ray that would not start: the message says what was kept
        print(end.message, file=sys.stderr, flush=True)
        return end.code
    except Exception as exc:
        return report_failure(config, exc)
    return exits.OK


class NoStart(Exception):
    """``prepare`` stopped the start: ``code`` is the exit status (``exits``), the message what to say."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code

    def report(self) -> int:
        """Print the one line (stderr for a refusal or failure, stdout for nothing to train); the exit status."""
        if self.code == exits.OK:
            print(f"[verl-ascend] {self}", flush=True)
        else:
            print(f"[verl-ascend] error: {self}", file=sys.stderr, flush=True)
        return self.code


def prepare(recipe: Recipe, config: DictConfig, device: DeviceHooks) -> None:
    """Everything the driver does before Ray starts; raises ``NoStart``, holding no lock then."""
    from verl_ascend.checks.preflight import PreflightError
    from verl_ascend.run.files import RunFileError
    from verl_ascend.run.run_guard import NothingToTrain, RunLock, StartRefused

    taken: list[str] = []  # the folders this call locked: kept by a committed start, released otherwise
    try:
        _prepare(config, device, taken)
        taken.clear()
    except NothingToTrain as exc:
        raise NoStart(exits.OK, str(exc)) from None
    except (PreflightError, StartRefused, envs.EnvValueError) as exc:
        raise NoStart(exits.REFUSED, str(exc)) from None
    except RunFileError as exc:  # the run folder stopped taking writes while it was being prepared
        raise NoStart(exits.FAILED, str(exc)) from None
    finally:
        RunLock.release(taken)


def _prepare(config: DictConfig, device: DeviceHooks, taken: list[str]) -> None:
    """Order matters: whatever can refuse runs before a byte in the output folder changes."""
    from verl_ascend.run import checkpoints, cluster
    from verl_ascend.run.run_guard import RunLock

    device.prepare_config(config)
    taken += RunLock.acquire(checkpoints.existing_run_folders(config))  # cheap: a second run stops here
    check(config)
    cluster.adapt_ray_init(config)  # an existing cluster (ray start): connect, don't size one
    plan = checkpoints.plan_start(config)  # resume point, history guard, data order: or a refusal
    device.deliver_config(config)
    taken += RunLock.acquire(plan.folders, create=True)  # committed: only now may files change
    checkpoints.commit_start(config, plan)


def _device(config: DictConfig) -> str:
    """``trainer.device`` (``cpu`` unset: the checks name a config without a trainer section)."""
    from omegaconf import OmegaConf

    return str(OmegaConf.select(config, "trainer.device", default=None) or "cpu")


def check(config: DictConfig) -> None:
    """The one validation pipeline with the run's files; ``PreflightError`` naming every blocking finding."""
    from verl_ascend import checks
    from verl_ascend.checks.preflight import PreflightError

    advice = envs.flag(DOCTOR_SWITCH)
    if not advice:
        logger.warning("VERL_ASCEND_DOCTOR=0: the config doctor's advice is skipped (launch checks still run)")
    found = checks.validate(config, dict(os.environ), inputs=True, advice=advice)
    refused = checks.refusal(found, checks.strict_of(config))
    if refused is not None:
        raise PreflightError(str(refused))
    _say_what_starts_anyway(found)


def _say_what_starts_anyway(found) -> None:
    """Warnings do not stop a start, but the user who typed ``verl-ascend train`` must see them before
    Ray's output buries the top of the screen: each one, then how many notes the doctor would list."""
    from verl_ascend.checks.findings import INFO, WARN

    for finding in found:
        if finding.severity == WARN:
            print(f"[verl-ascend] warning: {finding.rule}: {finding.message}", file=sys.stderr, flush=True)
    notes = sum(f.severity == INFO for f in found)
    if notes:
        print(f"[verl-ascend] {notes} note(s) from the checks: `verl-ascend doctor` with the same overrides lists them",
              file=sys.stderr, flush=True)


def _external_modules(recipe: Recipe) -> str:
    """``VERL_USE_EXTERNAL_MODULES`` with the recipe's module added to what the user listed."""
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    return ",".join(modules if recipe.external_module in modules else [*modules, recipe.external_module])


def start(recipe: Recipe, config: DictConfig) -> None:
    """Ray and upstream's ``run_ppo``, with a guardian, stop handlers and a progress line."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    from verl_ascend.paths import RunPaths
    from verl_ascend.run import checkpoints, cluster, lifetime, progress, warm_workers
    from verl_ascend.run.run_guard import RunLock

    checkpoints.export_to_workers(config, {"VERL_USE_EXTERNAL_MODULES": _external_modules(recipe)})
    paths = RunPaths.of(config)
    printer = progress.start_printer(config.trainer.get("logger") or [], paths.default_metrics,
                                     config.trainer.get("total_training_steps"))
    try:
        lifetime.Guardian.start(RunLock.held, paths.checkpoints, paths.run_dir)  # takes the run down if this process dies
        lifetime.install_stop_handlers()
        # Ray started here with warm workers, or (0, the default) by upstream's run_ppo
        warm_workers.start(config, recipe.warm_workers(config))
        up = []  # run_ppo's ray.init succeeded: from then on no failure is a start-up timeout
        runner = lifetime.after_ray_init(TaskRunnerV1, lambda: (up.append(True), lifetime.install_stop_handlers()))
        # the runner trains the recipe's class for the user's mode; the config keeps the mode as written
        runner.actor_class = trainer_mode.runner_for(runner.actor_class, recipe.trainers)
        cluster.start_ray(lambda: run_ppo(config, task_runner_class=runner), reached=lambda: bool(up))
    except KeyboardInterrupt:
        raise lifetime.stopped(paths.checkpoints, paths.run_dir) from None
    finally:
        if printer is not None:
            printer.stop()
        _stop_ray()  # before the driver ends, so the guardian finds nothing of the run left


def report_failure(config: DictConfig, exc: BaseException) -> int:
    """The run failed while training: Ray stopped first (no worker's log lands after it), then one last
    line says what happened, what was kept and how to resume (``verl_ascend.run.faults``); a fault it
    cannot name gets its traceback first. Returns ``exits.FAILED``."""
    import traceback

    from verl_ascend.run import faults, files, worker_log

    _stop_ray()
    site = faults.site_of(config)
    line = faults.describe_failure(exc, site)
    if line is None:
        traceback.print_exception(exc, file=sys.stderr)
        line = faults.unnamed_failure(exc, site)
    kept = worker_log.kept_summary(os.environ.get(files.ENV_RUN_DIR))
    if kept:
        print(f"[verl-ascend] note:{kept}", file=sys.stderr, flush=True)
    print(f"[verl-ascend] error: {line}", file=sys.stderr, flush=True)
    return exits.FAILED


def _stop_ray() -> None:
    """Shut the driver's Ray down before the last line: its log monitor streams the workers' output until
    then, so the error would scroll away under their lines (found by scripts/fault_harness.py)."""
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception as exc:  # a cluster already gone must not hide the fault being reported
        logger.debug("ray.shutdown after a failed run: %s", exc)


# ----------------------------------------------------------------------------- `verl-ascend train`
# Hydra's own files: ./outputs/<date>/<time>/ with .hydra/ and a log, written on every start -- also by
# one the checks then refuse. The run's outputs live under $VERL_ASCEND_OUTPUT_DIR.
HYDRA_QUIET = {
    "hydra.run.dir": "hydra.run.dir=.",
    "hydra.output_subdir": "hydra.output_subdir=null",
    "hydra/job_logging": "hydra/job_logging=stdout",
}


def _train_help(recipe: Recipe) -> str:
    """``verl-ascend train --help``: Hydra parses the real arguments; this parser only explains them."""
    from verl_ascend.cli import parser

    p = parser("train", "Train with the installed recipe: Hydra composes the recipe's config on upstream's ppo_trainer "
               "and every upstream-style override works; DRY_RUN=1 prints and judges instead (as verl-ascend dry-run). "
               f"Default config: {recipe.default_config} (doctor and dry-run default to it too).",
               ["DRY_RUN=1 verl-ascend train --config-name dapo_qwen25_32b_npu"])
    p.add_argument("--config-name", metavar="NAME", help=f"the recipe's config (default {recipe.default_config})")
    p.add_argument("overrides", nargs="*", help="upstream-style Hydra overrides, e.g. data.max_response_length=1234")
    return p.format_help()


def hydra_args(argv: list[str]) -> list[str]:
    """``argv`` plus the overrides that keep Hydra from writing files, unless the user set them."""
    given = {arg.lstrip("+~").split("=", 1)[0] for arg in argv}
    return argv + [override for key, override in HYDRA_QUIET.items() if key not in given]


def train(argv: list[str] | None = None, recipe: Recipe | None = None) -> int:
    """``verl-ascend train [--config-name NAME] [overrides...]``: Hydra parses ``argv`` as upstream's main_ppo would."""
    import hydra

    from verl_ascend.run.config_utils import ConfigError, compose, legacy_moves, split_argv

    argv = sys.argv[1:] if argv is None else list(argv)
    recipe = recipe or registered_recipe()
    if argv[:1] in (["-h"], ["--help"]):
        print(_train_help(recipe).rstrip())
        return exits.OK
    name, overrides = split_argv(argv, recipe.default_config)
    if legacy_moves([arg for arg in overrides if not arg.startswith("+")]):  # Hydra would suggest a '+': read by nothing
        try:
            compose(name, overrides, recipe.config_dir)
        except ConfigError as exc:  # the composer's error names each old key's new home
            return NoStart(exits.REFUSED, str(exc)).report()
    codes = []
    main = hydra.main(config_path=str(recipe.config_dir), config_name=recipe.default_config, version_base=None)
    sys.argv[1:] = hydra_args(argv)
    main(lambda config: codes.append(launch(recipe, config)))()
    return codes[0] if codes else exits.OK
