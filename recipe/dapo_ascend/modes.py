"""The recipe's trainer registry: one class per upstream trainer mode (``verl_ascend/trainer_mode.py``).

Each class (``trainer.py``) is registered with upstream's ``register_trainer`` under the recipe's
name for its mode. The names are internal: the config keeps the user's mode, and the task runner the
launch hands ``run_ppo`` (``verl_ascend.trainer_mode.runner_for`` over this table, declared as
``RECIPE.trainers`` in ``main_dapo.py``) resolves that mode to the recipe's class in its own process; a
user who writes one of these names is refused before Ray (``checks.py``).
"""

from __future__ import annotations

from verl_ascend import trainer_mode

# upstream's mode -> the name the recipe's class for it is registered under
REGISTRY = {trainer_mode.SYNC: "dapo_ascend", trainer_mode.COLOCATE: "dapo_ascend.colocate_async",
            trainer_mode.SEPARATE: "dapo_ascend.separate_async"}
