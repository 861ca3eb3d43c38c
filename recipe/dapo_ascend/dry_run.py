"""``DRY_RUN=1``: show what a job would run with, judge it, and start nothing.

Why: on 128 cards a wrong key costs hours before it shows. The dry run prints, from the same
composed config the job would get, (1) the whole config as YAML with interpolations resolved,
(1b) the effective settings: each switch's value where upstream consumes it (the actor's FSDP
engine config, the vLLM engine arguments incl. additional_config, the target vLLM/vllm-ascend
release; ``verl_ascend/checks/effective.py``, given the Ascend env profile), (2) the per-role environment the Ascend env profile would deliver, as ``KEY=VALUE`` lines with
the reason for each value, and (3) the findings and verdict of the one validation pipeline (``verl_ascend.checks.validate``, the
rules the launch runs except those that read the run's files: the same verdict as
``verl-ascend doctor``); then it exits. It
imports no Ray-starting code and touches no device, so it runs on any CPU machine (and in CI).

Exit status (the checks' one table, ``verl_ascend.checks.exits``): 0 when the checks accept the config,
2 when they refuse (same as a real launch and the doctor).
``VERL_ASCEND_DOCTOR_STRICT=1`` (or a config key ``doctor.strict``) makes warnings refuse too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from omegaconf import DictConfig, OmegaConf

from verl_ascend.checks.exits import OK, REFUSED

ROLE_TITLES = {
    "train": "every Ray actor of the job (training workers, task runner)",
    "rollout": "rollout servers and the vLLM processes they spawn (inherits train)",
}


def render_config(config: DictConfig) -> str:
    """The config as YAML, interpolations resolved so overrides show where they land."""
    try:
        return OmegaConf.to_yaml(config, resolve=True)
    except Exception as exc:  # an unresolvable interpolation must not hide the rest
        return f"# (interpolations left unresolved: {exc})\n" + OmegaConf.to_yaml(config, resolve=False)


def render_env(config: DictConfig, environ: Mapping[str, str]) -> list[str]:
    """``KEY=VALUE  # reason`` per role, from verl.ascend.env.profile; comments if it cannot resolve."""
    try:
        from verl.ascend.env.profile import EnvConflictError, resolve_env_profile
    except ImportError as exc:
        return [f"# env profile unavailable: {exc}"]
    try:
        profile = resolve_env_profile(config, environ)
    except EnvConflictError as exc:
        return [f"# env profile not resolved: {exc}", "# (the doctor below lists every conflict)"]
    except Exception as exc:  # a broken profile table: say so, the doctor refuses the run below
        return [f"# env profile failed: {type(exc).__name__}: {exc}"]
    lines: list[str] = []
    for role, title in ROLE_TITLES.items():
        lines.append(f"# --- role {role}: {title}")
        effective = profile.effective(role)
        for name, value in effective.items():
            setting = profile.settings[role].get(name) or profile.settings["train"].get(name)
            reason = setting.reason if setting is not None else ""
            lines.append(f"{name}={value}" + (f"  # {reason}" if reason else ""))
    lines += [f"# warning: {w}" for w in profile.warnings]
    from verl.ascend.weight_sync import pool_lines

    return lines + pool_lines(config)


def env_profile_for(config: DictConfig, environ: Mapping[str, str]):
    """The Ascend backend's env profile of this config (its stack and vLLM additional_config), or None."""
    try:
        from verl.ascend.env.profile import evaluate_env_profile
    except ImportError:
        return None
    profile, _errors = evaluate_env_profile(config, environ)
    return profile


def _evaluated_once():
    """The Ascend env profile evaluated once for the whole dry run (three sections read it)."""
    try:
        from verl.ascend.env.profile import evaluated_once
    except ImportError:
        return contextlib.nullcontext()
    return evaluated_once()


def profile_evaluated_once(fn):
    """``fn`` with the Ascend env profile evaluated once per call (``main_dapo.main_with_config``: a
    launch's checks and its ``apply_to_config``, or a dry run, read one evaluation)."""

    @functools.wraps(fn)
    def once(*args, **kwargs):
        with _evaluated_once():
            return fn(*args, **kwargs)

    return once


def main(config: DictConfig, environ: Mapping[str, str] | None = None, out: TextIO | None = None) -> int:
    """Print config, env and verdict to ``out``; return the exit status (never starts anything)."""
    with _evaluated_once():
        return _main(config, environ, out)


def _main(config: DictConfig, environ: Mapping[str, str] | None, out: TextIO | None) -> int:
    from verl_ascend import checks
    from verl_ascend.checks import effective

    environ = dict(os.environ if environ is None else environ)
    out = out or sys.stdout
    strict = checks.strict_of(config, environ)

    def emit(text: str = "") -> None:
        print(text, file=out)

    emit("# ===== verl-ascend dry run: composed config (upstream verl 0.9.1 + recipe) =====")
    emit(render_config(config).rstrip())
    emit("# ===== effective settings (values where upstream verl consumes them) =====")
    for line in effective.render(config, env_profile_for(config, environ)):
        emit(line)
    emit("# ===== env profile (KEY=VALUE per role) =====")
    for line in render_env(config, environ):
        emit(line)
    emit("# ===== config doctor =====")
    findings = checks.validate(config, environ)
    emit(checks.format_report(findings, strict))
    emit("# dry run: nothing started (no Ray, no devices)")
    out.flush()
    refused = checks.refusal(findings, strict)
    if refused is not None:
        print(str(refused), file=sys.stderr, flush=True)
        return REFUSED
    return OK


def cli(argv: list[str] | None = None) -> int:
    """``verl-ascend dry-run [--config-name NAME] [overrides...]`` (``DRY_RUN=1`` without a launch script)."""
    from recipe.dapo_ascend.config_utils import ConfigError, compose, legacy_report
    from verl_ascend.cli import parser as cli_parser

    parser = cli_parser("dry-run", __doc__.splitlines()[0],
                        ["DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh trainer.nnodes=2   # the same, via the script"])
    parser.add_argument("--config-name", default="dapo_qwen25_32b_npu")
    parser.add_argument("overrides", nargs="*", help="upstream-style Hydra overrides")
    args = parser.parse_args(argv)
    report = legacy_report(args.config_name, args.overrides)
    if report is not None:  # upstream's old reward keys: every culprit in one report
        print(report, file=sys.stderr)
        return REFUSED
    try:
        config = compose(args.config_name, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    return main(config)
