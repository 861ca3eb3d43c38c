"""Entry point of group ``verl.plugins``: loaded at every ``import verl``, in every process."""


def register() -> None:
    from verl.cpu import platform  # noqa: F401  (registers the ``cpu`` platform)
