"""verl_ascend: the device-neutral toolkit of the verl-ascend distribution.

Lives outside upstream's ``verl`` namespace so importing it never runs upstream's
``verl/__init__``. Homes: ``report`` (trace/metrics report), ``checks`` (config checks),
``run`` (run machinery), ``seams`` (hooks into upstream). Imports neither backend nor the recipe.
"""
