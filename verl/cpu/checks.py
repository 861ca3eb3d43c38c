"""The CPU backend's part of the one validation pipeline: what its platform fills in before the checks.

At launch, ``verl/cpu/config_defaults.py`` is applied before the pipeline runs (``PlatformCPU.prepare_config``,
called by the launch; upstream's entry points get it through ``auto_set_device``, seam ``cpu_auto_set_device``);
in ``separate_async`` it supplies the standalone rollout pool and the gloo weight-sync engine where the user set neither. The
doctor and ``DRY_RUN=1`` do not apply those defaults, so the rules that would refuse the unset values
(``verl_ascend/checks/rules_async.py``) are told here which keys the launch fills, and note them instead.

Registered through the entry point ``verl_ascend.checks: cpu = verl.cpu.checks:register_checks`` (setup.py).
"""

from __future__ import annotations

SOURCE = "the CPU platform (verl/cpu/config_defaults.py, separate_async)"


def launch_defaults() -> dict[str, str]:
    """The keys ``config_defaults`` fills in a ``separate_async`` run on a CPU (key -> what fills it)."""
    from verl.cpu.config_defaults import ENGINE

    rollout = "actor_rollout_ref.rollout"
    return {
        f"{rollout}.nnodes": SOURCE,
        f"{rollout}.n_gpus_per_node": SOURCE,
        f"{ENGINE}.backend": f"{SOURCE}: gloo",
        f"{ENGINE}.custom_backend_module": SOURCE,
    }


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``)."""
    from verl_ascend import checks

    checks.register_launch_defaults("cpu", launch_defaults())
