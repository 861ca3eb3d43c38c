"""Entry point of group ``verl.plugins``: loaded at every ``import verl``, in every process.

Upstream loads the entry point (imports this module and fetches ``register``) but does not
call it, so the module calls ``register()`` itself; calling it again is a no-op.

Cheap by design (it runs in the driver and in every Ray worker): it imports no torch_npu,
vLLM or transformers. It
1. installs the CPU NPU emulator when ``VERL_ASCEND_NPU_EMULATOR=1`` and no real torch_npu
   imports (tests; see :mod:`verl.ascend.emulator`);
2. registers :class:`verl.ascend.platform.AscendPlatform` under upstream's name ``huawei``
   (upstream's ``platform_npu`` is already imported by ``verl/__init__``);
3. arms the lazy runtime patches listed in :mod:`verl.ascend.patch` (each applies only when
   upstream imports its target).
"""

from __future__ import annotations

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    try:
        from verl.ascend import emulator

        if emulator.requested():
            emulator.install()
        from verl.ascend import platform  # noqa: F401  (registers ``huawei``)
        from verl.ascend.patch import install_lazy_patches

        install_lazy_patches()
    except Exception as e:
        # Upstream swallows plugin errors at DEBUG level; say it loudly before re-raising.
        import logging

        logging.getLogger("verl.ascend").error("verl.ascend plugin failed to load: %s", e)
        raise
    _registered = True


register()
