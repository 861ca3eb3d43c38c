"""The CPU backend's part of the one validation pipeline: what its platform fills in before the checks.

At launch, ``verl/cpu/config_defaults.py`` is applied before the pipeline runs (``PlatformCPU.prepare_config``,
called by the launch; upstream's entry points get it through ``auto_set_device``, seam ``cpu_auto_set_device``);
in ``separate_async`` it supplies the standalone rollout pool and the gloo weight-sync engine where the user set neither. The
doctor and ``DRY_RUN=1`` do not apply those defaults, so the rules that would refuse the unset values
(``verl_ascend/checks/rules_async.py``) are told here which keys the launch fills, and note them instead,
and which engine module it names (``verl_ascend/checks/engine_modules.py``: a backend name that module does
not register, ``gloo`` being the only one, is refused before Ray). The rule ``gloo_engine_kwargs`` checks the
gloo engine's keyword arguments with the engine's own declaration (``engine_options.py``).

Registered through the entry point ``verl_ascend.checks: cpu = verl.cpu.checks:register_checks`` (setup.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from verl_ascend.checks.findings import ERROR, Finding
from verl_ascend.checks.pipeline import keys_named, tag

SOURCE = "the CPU platform (verl/cpu/config_defaults.py, separate_async)"
# Where upstream builds the engine with engine_kwargs.<backend> as keyword arguments, inside Ray.
ENGINE_BUILT_IN = "verl/workers/engine_workers.py (trainer) and verl/checkpoint_engine/base.py (rollout servers)"


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


def launch_engine_module() -> tuple[tuple[str, ...], str]:
    """(trainer modes, module): the weight-sync engine module ``config_defaults`` names where the user named none."""
    from verl.cpu.config_defaults import GLOO_MODULE

    return ("separate_async",), GLOO_MODULE


def gloo_engine_kwargs(view) -> Iterator[Finding]:
    """``engine_kwargs.gloo`` as the gloo engine parses it (its one declaration, ``engine_options.py``).

    Upstream passes the mapping to the engine's constructor in every trainer and rollout worker, after
    Ray and the model have started; a value the engine refuses is refused here first, on every device."""
    from verl.cpu.engine_options import GlooEngineOptions

    for problem in GlooEngineOptions.problems(view.config):
        yield Finding(
            "gloo_engine_kwargs", ERROR,
            f"{problem} -- upstream builds the weight-sync engine with these keyword arguments inside Ray "
            f"({ENGINE_BUILT_IN}), where verl/cpu/checkpoint_engine.py::GlooCheckpointEngine would refuse it",
            keys_named(problem))


tag(gloo_engine_kwargs, launch=True)  # the engine would refuse it inside Ray: VERL_ASCEND_DOCTOR=0 keeps it


def register_checks() -> None:
    """Entry point (group ``verl_ascend.checks``)."""
    from verl_ascend import checks

    checks.register_launch_defaults("cpu", launch_defaults())
    checks.register_launch_engine_module("cpu", *launch_engine_module())
    checks.register(gloo_engine_kwargs)
