"""What a recipe declares to be launched (:class:`Recipe`), and how the toolkit finds it without importing it.

A recipe module holds one ``Recipe`` and names it in the entry-point group ``verl_ascend.recipes``
(setup.py); ``verl-ascend train``, ``doctor``, ``dry-run`` and ``env`` load it from there, so the
toolkit's commands name no recipe and a second recipe copies nothing of the launch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECIPES_GROUP = "verl_ascend.recipes"  # entry points: name = module:Recipe (setup.py)


@dataclass(frozen=True)
class Recipe:
    """What a recipe declares to be launched: everything else is the toolkit's."""

    config_dir: Path
    default_config: str  # train, doctor and dry run compose it when given no --config-name
    base_config: str  # the config with every default and no job (``verl-ascend env``)
    external_module: str  # upstream imports it in every process (VERL_USE_EXTERNAL_MODULES)
    trainers: Mapping[str, str]  # upstream's trainer mode -> the recipe's registered trainer name (start())
    warm_workers: Callable[[Any], int]  # Ray workers to start warm (0: upstream starts Ray)

    def compose(self, config_name: str | None = None, overrides: Sequence[str] = ()) -> Any:
        """One of this recipe's configs with Hydra ``overrides``, as ``train`` would compose it (no Hydra app)."""
        from verl_ascend.run.config_utils import compose

        return compose(config_name or self.default_config, overrides, self.config_dir)


def registered_recipe() -> Recipe:
    """The one recipe installed (entry-point group ``verl_ascend.recipes``); ``ValueError`` unless exactly one."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=RECIPES_GROUP)}
    if len(found) != 1:
        names = ", ".join(sorted(found)) or "none"
        raise ValueError(f"{len(found)} recipes installed (entry points {RECIPES_GROUP}: {names}); pass --config-dir")
    name, point = next(iter(found.items()))
    recipe = point.load()
    if not isinstance(recipe, Recipe):
        raise ValueError(f"entry point {RECIPES_GROUP} {name} is {recipe!r}, not a Recipe")
    return recipe
