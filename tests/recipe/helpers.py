"""Run the recipe's entry point the way a user does: a subprocess with Hydra overrides."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.launch import require_e2e

REPO = Path(__file__).resolve().parents[2]


def run_recipe(
    overrides: list[str],
    tiny_dir: Path,
    out_dir: Path,
    timeout: int = 600,
    env: dict | None = None,
    config: str = "dapo_tiny_cpu",
):
    require_e2e("the recipe's entry point")
    full_env = {
        **os.environ,
        "VERL_ASCEND_TINY_DIR": str(tiny_dir),
        "VERL_ASCEND_OUTPUT_DIR": str(out_dir),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    full_env.pop("VERL_FILE_LOGGER_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "recipe.dapo_ascend.main_dapo", "--config-name", config, *overrides],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
