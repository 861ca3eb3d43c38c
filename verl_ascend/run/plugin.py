"""Entry point of group ``verl.plugins`` for the toolkit's run machinery, loaded at every ``import verl``.

Why the toolkit has one: what a launched run changes in upstream's own worker processes (the
``plugin``-stage rows of :mod:`verl_ascend.run.seams`) must act in every process on every node, on a
CPU and on an NPU alike, so neither backend's plugin is the place. Cheap: each row's installer reads
an environment variable and returns when the process is not part of a run launched by ``verl-ascend``.
"""


def register() -> None:
    from verl_ascend.seams import install

    install("plugin", owner="verl_ascend")


register()
