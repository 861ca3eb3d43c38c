"""Upstream's trainer modes, run by the recipe's trainer: ``trainer.v1.trainer_mode``.

The user names upstream's mode with upstream's key and values (``sync``, ``colocate_async``,
``separate_async``); the checks, the dry run and the report read that value. Upstream's task
runner picks the trainer class by the same key (``get_trainer_cls(config.trainer.v1.trainer_mode)``),
so just before ``run_ppo`` the entry point swaps in the recipe's registry name for the mode
(``to_registry_name``); the recipe's trainer puts upstream's name back in its ``__init__``
(``trainer.py``: ``DAPOAscendHooks.__init__``), before upstream's code reads it.

The registry names are internal: a user who writes one is refused before Ray (``checks.py``).
"""

from __future__ import annotations

from omegaconf import DictConfig, open_dict

from verl_ascend.checks.rules_async import COLOCATE, MODE as MODE_KEY, SEPARATE

ASYNC_MODES = (COLOCATE, SEPARATE)
UPSTREAM_MODES = ("sync", *ASYNC_MODES)
# upstream's mode -> the recipe's trainer class for it, as registered with upstream's register_trainer
REGISTRY = {"sync": "dapo_ascend", "colocate_async": "dapo_ascend.colocate_async",
            "separate_async": "dapo_ascend.separate_async"}


def mode_of(config) -> str:
    """The upstream mode a config asks for (``sync`` when unset)."""
    v1 = (config.get("trainer") or {}).get("v1") or {}
    return str(v1.get("trainer_mode") or "sync")


def to_registry_name(config: DictConfig) -> str:
    """Point upstream's trainer registry at the recipe's class for the config's mode; returns the name.

    Called once, by the launch (``verl_ascend.launch.start``, as ``RECIPE.bind_trainer``) right before ``run_ppo``; the checks have accepted the mode by then.
    """
    mode = mode_of(config)
    if mode in REGISTRY.values():  # a retried start (cluster.start_ray): already pointed
        return mode
    if mode not in REGISTRY:
        raise ValueError(f"{MODE_KEY}={mode!r}: the recipe runs {', '.join(UPSTREAM_MODES)}")
    with open_dict(config):
        config.trainer.v1.trainer_mode = REGISTRY[mode]
    return REGISTRY[mode]
