"""Entry point of group ``vllm.general_plugins``."""


def register() -> None:
    return None
