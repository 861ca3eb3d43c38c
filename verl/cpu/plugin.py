"""Entry point of group ``verl.plugins``, loaded at every ``import verl`` in every process.

Upstream *loads* each entry point (``EntryPoint.load()`` imports the module and fetches the
attribute) but never calls it, so registration happens when this module is imported;
``register()`` is the same, idempotent, for explicit use.

Cheap by design: it registers the ``cpu`` platform class and arms lazy hooks; nothing heavy
is imported until upstream itself imports the module a hook targets.
"""


def register() -> None:
    from verl_ascend.seams import install

    from verl.cpu import platform  # noqa: F401  (platform registers itself on import)

    install("plugin", owner="verl.cpu")  # this backend's "plugin" rows (verl/cpu/seams.py): verl.cpu.patches


register()
