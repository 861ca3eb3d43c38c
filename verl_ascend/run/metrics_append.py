"""Runtime patch of upstream's ``FileLogger``: append to the metrics file instead of truncating it.

Upstream verl 0.9.1 opens ``$VERL_FILE_LOGGER_PATH`` with mode ``"wb"``: every restart erased the
metrics of the steps already trained. The run's entry point trims the file to the resumed step
(``checkpoints.prepare_run``) and sets ``VERL_ASCEND_METRICS_APPEND=1``; the trainer then appends.
"""

from __future__ import annotations

import os

from verl_ascend.run.files import ENV_METRICS_APPEND, RunFileError


def install_metrics_append() -> bool:
    """Runtime patch: upstream's ``FileLogger`` appends to ``$VERL_FILE_LOGGER_PATH`` instead of
    truncating it (``open(path, "wb")`` in verl 0.9.1 ``utils/tracking.py``), and a failed open or
    write stops the run with ``RunFileError`` naming the file and the errno (upstream's bare
    ``PermissionError`` came after the step's checkpoint was written, a step with no metrics).

    Switched on by ``VERL_ASCEND_METRICS_APPEND=1`` (set by the recipe's entry point after it has
    trimmed the file to the resumed step); installed in the process that builds ``Tracking``.
    Remove when upstream's FileLogger appends (``tests/verl_ascend/run/test_resume.py`` fails then).

    Seam ``file_logger_append``; upstream fix (none filed yet): ``FileLogger`` opening its file with ``ab``.
    """
    if os.environ.get(ENV_METRICS_APPEND, "0") != "1":
        return False
    from verl.utils import tracking

    if getattr(tracking.FileLogger, "_verl_ascend_appends", False):
        return True
    upstream = tracking.FileLogger

    class AppendingFileLogger(upstream):
        _verl_ascend_appends = True

        def __init__(self, project_name: str, experiment_name: str):
            path = os.environ.get("VERL_FILE_LOGGER_PATH")
            if not path:
                super().__init__(project_name, experiment_name)
                return
            self.project_name = project_name
            self.experiment_name = experiment_name
            self.filepath = path
            print(f"Appending file logger at {os.path.abspath(path)}")
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                self.fp = open(path, "ab", buffering=0)
            except OSError as exc:
                raise RunFileError.of(path, exc) from exc

        def log(self, data, step):
            try:
                super().log(data, step)
            except OSError as exc:
                raise RunFileError.of(self.filepath, exc) from exc

    AppendingFileLogger.__name__ = upstream.__name__
    AppendingFileLogger.__qualname__ = upstream.__qualname__
    tracking.FileLogger = AppendingFileLogger
    return True
