"""One object for where a run's files live, computed in one place from the config and the environment.

Before this, the run folder was derived in three modules (entry point, resume, data check), each
re-reading ``$VERL_ASCEND_OUTPUT_DIR``; a change to one would have split a run's files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from verl_ascend import envs


@dataclass(frozen=True)
class RunPaths:
    output_dir: str  # $VERL_ASCEND_OUTPUT_DIR, absolute
    experiment_dir: str  # <output_dir>/<trainer.experiment_name>
    metrics: Optional[str]  # the file logger's metrics.jsonl (None when the file logger is off)
    run_dir: str  # the folder of the run's own files (journal, lock owner): experiment_dir, wherever the metrics go
    checkpoints: str  # trainer.default_local_dir, absolute

    @property
    def default_metrics(self) -> str:
        """Where the file logger writes when ``VERL_FILE_LOGGER_PATH`` does not say otherwise."""
        return os.path.join(self.experiment_dir, "metrics.jsonl")

    @property
    def clean_data(self) -> str:
        """Where ``data.skip_bad_rows=true`` writes the cleaned copies of the data files."""
        return os.path.join(self.experiment_dir, "clean_data")

    @classmethod
    def of(cls, config, environ: Mapping[str, str] | None = None) -> "RunPaths":
        environ = os.environ if environ is None else environ
        output_dir = os.path.abspath(envs.raw("VERL_ASCEND_OUTPUT_DIR", environ))
        experiment_dir = os.path.join(output_dir, str(config.trainer.experiment_name))
        loggers = config.trainer.get("logger", []) or []
        file_logger = "file" in ([loggers] if isinstance(loggers, str) else loggers)
        metrics = None
        if file_logger:
            metrics = os.path.abspath(environ.get("VERL_FILE_LOGGER_PATH") or os.path.join(experiment_dir, "metrics.jsonl"))
        checkpoints = os.path.abspath(os.path.expanduser(str(config.trainer.default_local_dir)))
        return cls(output_dir, experiment_dir, metrics, experiment_dir, checkpoints)
