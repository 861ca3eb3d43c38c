"""Report settings: the defaults in ``defaults.yaml`` merged with an optional user YAML file.

Why YAML: the stage names, file-name conventions and kernel patterns follow upstream verl,
vLLM-Ascend and torch_npu, which move; keeping them out of code lets a user adapt the report to a
newer release (``--settings my.yaml``) without patching it.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Optional

import yaml

DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")


class SettingsError(ValueError):
    """A settings file is unreadable or has a value of the wrong shape."""


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SettingsError(f"{path}: cannot read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise SettingsError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)}); expected a mapping of "
                            f"report settings like {DEFAULTS_FILE.name}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: top level is a {type(data).__name__}; expected a mapping of report settings "
                            f"like {DEFAULTS_FILE.name}")
    return data


def _compile(patterns: Any, key: str, source: str) -> list[re.Pattern]:
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise SettingsError(f"{source}: '{key}' must be a list of regex strings")
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as e:
            raise SettingsError(f"{source}: '{key}' pattern {p!r} is not a valid regex ({e})") from None
    return out


def _positive_int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{source}: {key}={value!r}; accepted: an integer >= 1")
    return value


# Mappings whose keys the user names (fused kernel families): any key is accepted there.
FREE_KEYS = ("fused_kernels",)


def unknown_keys(data: dict, reference: dict, prefix: str = "") -> list[str]:
    """Keys of ``data`` that the defaults do not have (a misspelling would be silently ignored)."""
    found = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key not in reference:
            found.append(name)
        elif isinstance(value, dict) and isinstance(reference[key], dict) and name not in FREE_KEYS:
            found += unknown_keys(value, reference[key], name + ".")
    return found


class Settings:
    """Typed access to the merged settings; regexes are compiled once."""

    def __init__(self, data: dict, source: str = str(DEFAULTS_FILE)):
        self.data = data
        self.source = source
        self.top_n = _positive_int(data.get("top_n", 15), "top_n", source)
        self.timeline_points = _positive_int(data.get("timeline_points", 4000), "timeline_points", source)
        am = data.get("async_modes", {}) or {}
        gap_ms = am.get("gap_ms", 5)
        if isinstance(gap_ms, bool) or not isinstance(gap_ms, (int, float)) or gap_ms < 0:
            raise SettingsError(f"{source}: async_modes.gap_ms={gap_ms!r}; accepted: a number >= 0 (milliseconds)")
        self.async_gap_us = float(gap_ms) * 1000.0
        self.async_wait_phases: list[str] = list(am.get("wait", ["gen"]))
        self.async_sync_phases: list[str] = list(am.get("sync", ["update_weights"]))
        self.staleness_prefix = str(am.get("staleness_prefix", "training/off_policy/trajectory_staleness"))
        self.engine_prefix = str(am.get("engine_prefix", "weight_sync/"))
        self.separate_marker_res = _compile(am.get("separate_markers", []), "async_modes.separate_markers", source)
        tail = data.get("tail", {}) or {}
        self.tail_running_below = float(tail.get("running_below", 0.5))
        if not 0 < self.tail_running_below <= 1:
            raise SettingsError(f"{source}: tail.running_below must be in (0, 1], got {self.tail_running_below}")
        phases = data.get("phases", {}) or {}
        self.phase_order: list[str] = list(phases.get("order", []))
        self.rollout_phases: list[str] = list(phases.get("rollout", ["gen"]))
        self.train_phases: list[str] = list(phases.get("train", []))
        self.total_phase: str = str(phases.get("total", "step"))
        self.rollout_path_res = _compile(data.get("rollout_path_patterns", []), "rollout_path_patterns", source)
        self.rank_res = _compile(data.get("rank_patterns", []), "rank_patterns", source)
        self.step_res = _compile(data.get("step_patterns", []), "step_patterns", source)
        self.kernel_categories = set(data.get("kernel_categories", []))
        self.host_op_categories = set(data.get("host_op_categories", []))
        self.annotation_categories = set(data.get("annotation_categories", []))
        self.device_process_res = _compile(data.get("device_process_patterns", []), "device_process_patterns", source)
        self.comm_process_res = _compile(data.get("comm_process_patterns", []), "comm_process_patterns", source)
        self.overlap_process = str(data.get("overlap_process", "Overlap Analysis"))
        stages = (data.get("stage_annotations", {}) or {}).get("train", [])
        self.train_stage_names = set(stages)
        self.comm_res = _compile(data.get("communication_patterns", []), "communication_patterns", source)
        self.comm_exclude_res = _compile(data.get("communication_exclude", []), "communication_exclude", source)
        self.fused_kernels: dict[str, dict] = {}
        for key, spec in (data.get("fused_kernels", {}) or {}).items():
            if not isinstance(spec, dict):
                raise SettingsError(f"{source}: fused_kernels.{key} must be a mapping")
            entry = dict(spec)
            entry["compiled"] = _compile(spec.get("patterns", []), f"fused_kernels.{key}.patterns", source)
            self.fused_kernels[key] = entry

    # ------------------------------------------------------------------ helpers
    def is_comm(self, name: str) -> bool:
        return any(r.search(name) for r in self.comm_res) and not any(r.search(name) for r in self.comm_exclude_res)

    def fused_matches(self, name: str) -> list[str]:
        return [key for key, spec in self.fused_kernels.items() if any(r.search(name) for r in spec["compiled"])]

    def rollout_replica(self, path: str) -> Optional[int]:
        """Replica index if ``path`` is a rollout-engine output, else None (training)."""
        for r in self.rollout_path_res:
            m = r.search(path)
            if m:
                return int(m.group(1))
        return None

    def first_int(self, regexes: list[re.Pattern], text: str) -> Optional[int]:
        for r in regexes:
            m = r.search(text)
            if m:
                return int(m.group(1))
        return None


def load_settings(path: Optional[str | Path] = None) -> Settings:
    """Defaults, with ``path`` (a YAML file of the same shape) merged on top when given."""
    data = _load_yaml(DEFAULTS_FILE)
    source = str(DEFAULTS_FILE)
    if path is not None:
        override = _load_yaml(Path(path))
        unknown = unknown_keys(override, data)
        if unknown:
            raise SettingsError(f"{path}: unknown key(s) {', '.join(unknown)}; accepted: the keys of {DEFAULTS_FILE}")
        data = _merge(data, override)
        source = str(path)
    return Settings(data, source)
