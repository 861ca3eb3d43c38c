"""The DAPO recipe's launch: what is its own, declared; the rest is the toolkit's ``launch``.

``verl-ascend train [--config-name NAME] [overrides...]``: Hydra composes ``config/<name>.yaml`` on upstream's ``ppo_trainer``
(every upstream-style override works), then ``verl_ascend.launch.launch`` prepares, refuses before
Ray naming every culprit, locks, plans the resume, starts Ray and upstream's ``run_ppo`` with this
recipe's trainer for the user's trainer mode (``modes.py``). The toolkit finds this declaration
through the entry-point group ``verl_ascend.recipes`` (setup.py).
"""

from __future__ import annotations

from pathlib import Path

from verl_ascend.launch import Recipe

from recipe.dapo_ascend import modes


def warm_workers(config) -> int:
    """``trainer.v1.dapo_ascend.warm_workers``, through its one declaration."""
    from recipe.dapo_ascend.options import DapoAscendOptions

    return DapoAscendOptions.from_config(config).warm_workers


RECIPE = Recipe(
    config_dir=Path(__file__).resolve().parent / "config",
    default_config="dapo_tiny_cpu",  # the CPU demo: train, doctor and dry run alike
    base_config="dapo_base",
    external_module="recipe.dapo_ascend.register",
    trainers=modes.REGISTRY,
    warm_workers=warm_workers,
)

