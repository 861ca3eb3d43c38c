"""Deprecated alias (kept for one release): the config checks moved to ``verl_ascend.checks``.

``from verl.ascend import doctor; doctor.check(config)`` keeps working (the names below are
``verl_ascend.checks``'s); ``python -m verl.ascend.doctor`` hands over to the recipe's command
``python -m recipe.dapo_ascend.doctor`` (it composes the recipe's configs).
"""

from verl_ascend.checks import DoctorError, Finding, blocking, check, diagnose, format_report  # noqa: F401
