"""Where did each process of a run start, and what did it see? One JSON file per process.

For multi-node runs: proves that every node got the plugins (``verl.plugins`` entry points of
this distribution) and the environment the driver exported through Ray's ``runtime_env``.
Switched on by naming this module in ``VERL_USE_EXTERNAL_MODULES`` (upstream imports it at
``import verl`` in every process) and setting ``VERL_ASCEND_NODE_REPORT_DIR`` in the workers'
environment (``+ray_kwargs.ray_init.runtime_env.env_vars.VERL_ASCEND_NODE_REPORT_DIR=DIR``);
``scripts/two_node_cluster.sh run`` does both (with ``scripts/`` on ``PYTHONPATH`` of the nodes and the
driver, so upstream imports this file as ``node_report``) and prints a summary; nothing else uses it.

Upstream imports external modules *before* it loads plugin entry points, so the record is
written from a short-lived thread once ``import verl`` has finished: it then shows the
plugins as loaded and the platform they selected (rewritten during the first minute when the
process title changes, so a pooled worker shows the actor it became). File: ``<dir>/<node id>-<pid>.json`` with
``node_id``, ``pid``, ``host``, ``platform``, ``plugins``, ``env`` (the variables in
``ENV_KEYS``) and ``cmdline``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

ENV_DIR = "VERL_ASCEND_NODE_REPORT_DIR"
ENV_KEYS = (
    "VERL_USE_EXTERNAL_MODULES",
    "VERL_ASCEND_RUN_DIR",
    "VERL_ASCEND_METRICS_APPEND",
    "VERL_FILE_LOGGER_PATH",
    "OMP_NUM_THREADS",
    "VERL_PLATFORM",
    ENV_DIR,
)
PLUGIN_MODULES = ("verl.cpu.plugin", "verl.ascend.plugin")


def _verl_imported(timeout_s: float = 300.0) -> bool:
    """Wait until another thread has finished importing verl. Reads importlib's private
    ``ModuleSpec._initializing`` with a default (CPython has no public "import finished" flag): where the
    attribute is missing the wait is skipped, nothing breaks."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        module = sys.modules.get("verl")
        spec = getattr(module, "__spec__", None)
        if module is not None and not getattr(spec, "_initializing", False):
            return True
        time.sleep(0.05)
    return False


def snapshot() -> dict:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "plugins": [m for m in PLUGIN_MODULES if m in sys.modules],
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
        "cmdline": _cmdline(),
        "time": time.time(),
    }
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            record["node_id"] = context.get_node_id()
            record["node_ip"] = ray.util.get_node_ip_address()
    except Exception as exc:  # not a Ray process, or Ray not connected yet
        record["ray_error"] = repr(exc)
    try:
        from verl.plugin.platform.platform_manager import get_platform

        record["platform"] = type(get_platform()).__name__
    except Exception as exc:
        record["platform_error"] = repr(exc)
    return record


def _cmdline() -> str:
    try:
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return " ".join(sys.argv)


def write(directory: str) -> str:
    record = snapshot()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{record.get('node_id', 'nonode')}-{record['pid']}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)
    return path


def _report_when_ready(directory: str, refresh_s: float = 60.0) -> None:
    """Write once ``import verl`` is done; rewrite while the process title changes (a pooled
    ``ray::IDLE`` worker becomes ``ray::WorkerDict`` etc.), for ``refresh_s`` at most."""
    if not _verl_imported():
        return
    deadline = time.monotonic() + refresh_s
    last = None
    while True:
        try:
            title = _cmdline()
            if title != last:
                write(directory)
                last = title
        except Exception:
            return
        if time.monotonic() > deadline:
            return
        time.sleep(1.0)


def install() -> None:
    directory = os.environ.get(ENV_DIR)
    if directory:
        threading.Thread(target=_report_when_ready, args=(directory,), name="verl-ascend-node-report", daemon=True).start()


install()
