"""What a backend's platform class does for its device at launch, and how the launcher finds it.

Why on the platform class: the device decides what a config needs (the CPU fills in what upstream's
GPU defaults leave wrong, the NPU delivers its runtime-environment profile), and the platform is where
upstream already asks the device everything (vllm-ascend's ``NPUPlatform.check_and_update_config``
has the same shape). The launcher (``verl_ascend.launch``) and the dry run call these hooks on the
platform registered in upstream's ``PlatformRegistry`` for ``trainer.device``, so neither they nor a
recipe import a backend. Light on purpose: platform modules import it in every process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any


class DeviceHooks:
    """What a backend's platform class does for its device at launch; these defaults do nothing.

    A backend's platform subclasses it next to upstream's ``PlatformBase`` and sets ``config_device``
    to the ``trainer.device`` value it serves. The launcher calls the hooks on the platform of
    ``trainer.device`` (:func:`device_hooks`); a device no backend of ours serves gets these defaults.
    """

    config_device: str | None = None

    def prepare_config(self, config: Any) -> list[str]:
        """Before the checks: fill in what the device needs (one line per change); ``PreflightError`` refuses."""
        return []

    def deliver_config(self, config: Any) -> None:
        """After the checks, before Ray: put the device's settings where every process of the job sees them."""

    def env_profile(self, config: Any, environ: Mapping[str, str]) -> Any:
        """The environment the device delivers to the job, as the effective settings read it (None: none)."""
        return None

    def dry_run_lines(self, config: Any, environ: Mapping[str, str]) -> list[str]:
        """The dry run's device section, after the effective settings: what the device adds to each process."""
        return []

    def memory_devices(self, config: Any, environ: Mapping[str, str]) -> Mapping[str, Any]:
        """The cards this device can be, by name, the default first (``verl_ascend.memory.devices.DeviceMemory``):
        the memory plan holds each phase's peak against one of them ({}: the user sets ``memory.device_gib``)."""
        return {}

    def cluster_probe(self, job: Any) -> dict:
        """On each node, inside ``verl-ascend cluster``'s actor: the device's own probes of that node, as
        ``{"cells": [verl_ascend.cluster.cells.Cell, ...], "same": {column: {key: value}}}``; ``same`` holds
        facts that must be identical on every node (compared with the driver's node). ``job`` is a
        ``verl_ascend.cluster.job.Job``. This default probes nothing (the check marks the device's columns skipped)."""
        return {"cells": [], "same": {}}

    def cluster_collective(self) -> tuple[str, str]:
        """(torch.distributed backend, torch device type) of ``verl-ascend cluster``'s all-reduce: the job's."""
        return "gloo", "cpu"

    def cluster_resource(self) -> str:
        """The Ray resource one training rank of this device takes (one per card)."""
        return "GPU"

    def evaluated_once(self) -> contextlib.AbstractContextManager:
        """A scope in which the device's derived settings are computed once (a launch, a dry run)."""
        return contextlib.nullcontext()


def device_hooks(device: str) -> DeviceHooks:
    """The platform registered in upstream's ``PlatformRegistry`` for ``trainer.device=device``."""
    from verl.plugin.platform import PlatformRegistry

    for name in PlatformRegistry.registered_names():
        platform = PlatformRegistry.get(name)
        if issubclass(platform, DeviceHooks) and platform.config_device == device:
            return platform()
    return DeviceHooks()
