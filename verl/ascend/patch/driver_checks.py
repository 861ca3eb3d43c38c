"""Refuse a rollout engine that cannot start, in the driver of upstream's ``python -m verl.trainer.main_ppo``.

Upstream's ``main_ppo`` starts Ray, TransferQueue and the worker group before anything reads
``actor_rollout_ref.rollout.name`` (mandatory, ``???`` in its config) or imports the engine, then
dies in a multi-screen traceback from inside a Ray actor. ``auto_set_device`` is the first thing
its ``main`` does with the config, in the driver; on the Ascend platform the wrapper installed here
runs the engine checks of ``verl_ascend.checks.rules_engine`` right after upstream's function and
exits 2 naming the key and the accepted values. Other platforms get upstream's function unchanged
(the CPU backend has its own wrapper, seam row ``cpu_auto_set_device``).

Installed only where ``__main__`` is ``verl.trainer.main_ppo``: the recipe runs the same checks in
its preflight, and Ray workers never call it. Registered in :mod:`verl_ascend.seams.index` as
``ascend_auto_set_device``.

Upstream fix (none filed yet): ``main_ppo`` checking mandatory values (``OmegaConf.missing_keys``) and the
rollout engine before ``ray.init``, or a platform hook called by ``auto_set_device``; the row goes once
upstream's driver refuses an unset or uninstalled engine before Ray starts.
"""

from __future__ import annotations

import functools

from verl_ascend.seams.post_import import main_module, when_imported

ENTRY_POINTS = ("verl.trainer.main_ppo",)


def _on_ascend() -> bool:
    from verl.plugin.platform import get_platform

    from verl.ascend.platform import AscendPlatform

    return isinstance(get_platform(), AscendPlatform)


def patch_auto_set_device(module) -> None:
    original = module.auto_set_device
    if getattr(original, "__verl_ascend_patched__", False):
        return

    @functools.wraps(original)
    def auto_set_device(config) -> None:
        original(config)
        if config is not None and _on_ascend():
            from verl_ascend.checks.rules_engine import refuse_in_driver

            refuse_in_driver(config, "[verl.ascend]")

    auto_set_device.__verl_ascend_patched__ = True
    module.auto_set_device = auto_set_device


def install() -> bool:
    """Arm the wrapper in upstream's ``main_ppo`` driver; elsewhere decline (returns False)."""
    if main_module() not in ENTRY_POINTS:
        return False
    when_imported("verl.utils.device", patch_auto_set_device)
    return True
