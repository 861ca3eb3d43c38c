"""Entry point of group ``verl.plugins``: loaded at every ``import verl``, in every process.

Upstream loads the entry point (imports this module and fetches ``register``) but does not
call it, so the module calls ``register()`` itself; calling it again is a no-op.

Cheap by design (it runs in the driver and in every Ray worker): it imports no torch_npu,
vLLM or transformers. It
1. installs, through :func:`verl_ascend.seams.install`, this backend's ``plugin``-stage rows (:mod:`verl.ascend.seams`):
   the CPU NPU emulator when ``VERL_ASCEND_NPU_EMULATOR=1`` and no real torch_npu imports
   (tests; see :mod:`verl.ascend.emulator`), then the lazy runtime patches (each applies only
   when upstream imports its target);
2. registers :class:`verl.ascend.platform.AscendPlatform` under upstream's name ``huawei``
   (upstream's ``platform_npu`` is already imported by ``verl/__init__``).
"""

from __future__ import annotations

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    try:
        from verl_ascend.seams import install

        # The emulator (if requested), then the lazy patches: this backend's "plugin" rows, in index order.
        install("plugin", owner="verl.ascend")
        from verl.ascend import platform  # noqa: F401  (registers ``huawei``)
    except Exception as e:
        # Upstream swallows plugin errors at DEBUG level; say it loudly before re-raising.
        import logging

        logging.getLogger("verl.ascend").error("verl.ascend plugin failed to load: %s", e)
        raise
    _registered = True


register()
