"""Deprecated alias of ``python -m recipe.dapo_ascend.doctor`` (kept for one release).

A string hand-over (``runpy``): the backend does not import the recipe.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("recipe.dapo_ascend.doctor", run_name="__main__", alter_sys=True)
