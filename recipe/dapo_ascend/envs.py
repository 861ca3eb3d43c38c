"""The DAPO recipe's own environment variables, declared next to its code.

Registered in the entry-point group ``verl_ascend.envs`` (setup.py) and assembled by the toolkit's
registry (``verl_ascend/envs.py``: the lookups, the one boolean parser, ``verl-ascend envs``).
This module imports nothing but that registry's row type, so the assembly runs none of the recipe.
"""

from __future__ import annotations

from verl_ascend.envs import EnvVar

VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("VERL_ASCEND_TINY_DIR", "path", "~/.cache/verl-ascend/tiny", "recipe/dapo_ascend/tiny/assets.py",
           "Where the embedded default's tiny model, tokenizer and data are generated and cached."),
    EnvVar("VERL_ASCEND_PROFILE_DIR", "path", None, "recipe/dapo_ascend/config/profile/cpu.yaml",
           "global_profiler.save_path of the profile configs (else <VERL_ASCEND_OUTPUT_DIR>/profile/<experiment>)."),
)
