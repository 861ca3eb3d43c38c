"""What ``DRY_RUN=1`` / ``verl-ascend dry-run`` prints for an NPU job, between the config and the verdict.

Why: on 128 cards a wrong switch costs hours before it shows. From the same composed config the job
would get, after the effective settings (which read this profile's ``additional_config`` and target
stack: ``AscendPlatform.env_profile``): the per-role environment the env profile delivers,
``KEY=VALUE  # reason``, and the resource pools of an asynchronous job (``weight_sync.pool_lines``).
Called on the Ascend platform (``AscendPlatform.dry_run_lines``).
"""

from __future__ import annotations

from collections.abc import Mapping

from verl.ascend.env.profile import EnvConflictError, resolve_env_profile

ROLE_TITLES = {
    "train": "every Ray actor of the job (training workers, task runner)",
    "rollout": "rollout servers and the vLLM processes they spawn (inherits train)",
}


def lines(config, environ: Mapping[str, str]) -> list[str]:
    """The env-profile section of the dry run."""
    return ["# ===== env profile (KEY=VALUE per role) =====", *render_env(config, environ)]


def render_env(config, environ: Mapping[str, str]) -> list[str]:
    """``KEY=VALUE  # reason`` per role; comments when the profile cannot resolve (the checks name why)."""
    try:
        profile = resolve_env_profile(config, environ)
    except EnvConflictError as exc:
        return [f"# env profile not resolved: {exc}", "# (the doctor below lists every conflict)"]
    except Exception as exc:  # a broken profile table: say so, the doctor refuses the run below
        return [f"# env profile failed: {type(exc).__name__}: {exc}"]
    found: list[str] = []
    for role, title in ROLE_TITLES.items():
        found.append(f"# --- role {role}: {title}")
        for name, value in profile.effective(role).items():
            setting = profile.settings[role].get(name) or profile.settings["train"].get(name)
            reason = setting.reason if setting is not None else ""
            found.append(f"{name}={value}" + (f"  # {reason}" if reason else ""))
    found += [f"# warning: {w}" for w in profile.warnings]
    from verl.ascend.weight_sync import pool_lines

    return found + pool_lines(config)
