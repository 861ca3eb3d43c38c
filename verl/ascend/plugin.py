"""Entry point of group ``verl.plugins``: loaded at every ``import verl``, in every process."""


def register() -> None:
    return None
