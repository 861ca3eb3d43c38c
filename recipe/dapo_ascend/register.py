"""Imported in every process through upstream's ``VERL_USE_EXTERNAL_MODULES`` (set by the
recipe's entry point): arms the registration of the ``dapo_ascend`` trainer for the moment
upstream imports its V1 trainer package, so processes that never train pay nothing."""

from verl_ascend.seams.post_import import when_imported


def _register_trainer(_module) -> None:
    import recipe.dapo_ascend.trainer  # noqa: F401  (registers on import)


when_imported("verl.trainer.ppo.v1", _register_trainer)
