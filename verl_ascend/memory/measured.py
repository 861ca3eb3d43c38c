"""The plan against what a run measured: upstream's ``perf/max_memory_allocated_gb`` / ``_reserved_gb``.

Why these metrics and this part of the plan: upstream verl 0.9.1 logs both (under a role prefix,
``actor/perf/max_memory_allocated_gb``) at the end of every actor update and log-prob pass (``workers/engine_workers.py::_postprocess_output``: the training process's
``max_memory_allocated()`` / ``max_memory_reserved()``, never reset, so the process's peak so far). The
rollout engine runs in its own processes and the collective buffers are not torch's, so the figure to
hold them against is the trainer's own torch share of each training phase: the phase's terms minus the
engine's and the HCCL buffers. On an NPU that is ``torch.npu.max_memory_allocated``; on the CPU backend
upstream's call reaches ``verl.cpu.device_module``, whose figure is the process's peak RSS (interpreter,
libraries and all), so on CPU the comparison shows an upper bound, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl_ascend.memory.plan import Plan
from verl_ascend.memory.terms import GIB, Phase, Term

ALLOCATED, RESERVED = "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb"
TRAINING = ("actor update", "old log-prob", "ref log-prob")


def trainer_own(term: Term) -> bool:
    """A term the training process allocates through torch (not the engine's, not a collective buffer)."""
    name = term.name.lower()
    return not (name.startswith(("engine", "sleeping engine", "kv cache")) or "hccl" in name)


def trainer_peaks(plan: Plan) -> dict[str, int]:
    """Training phase -> the trainer process's planned torch peak in it."""
    def own(p: Phase) -> int:
        return sum(t.bytes for t in p.resident + p.active if trainer_own(t))

    return {p.name: own(p) for p in plan.phases if p.name in TRAINING}


def measured(values: Mapping[int, Mapping[str, Any]]) -> dict[str, float]:
    """The largest of each upstream memory metric over the run's steps (GiB; absent metrics left out)."""
    out = {}
    for key in (ALLOCATED, RESERVED):  # upstream's trainer logs them under a role prefix: actor/perf/...
        seen = [float(x) for v in values.values() for name, x in v.items()
                if name.endswith(key) and isinstance(x, (int, float)) and not isinstance(x, bool)]
        if seen:
            out[key] = max(seen)
    return out


def compare(plan: Plan, values: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Planned (per training phase, and their maximum) next to measured, with the relative difference."""
    peaks = trainer_peaks(plan)
    top = max(peaks, key=peaks.get) if peaks else None
    got = measured(values)
    out: dict[str, Any] = {"device": plan.card.name, "planned_gib": {k: round(v / GIB, 3) for k, v in peaks.items()},
                           "planned_peak_phase": top, "measured_gib": {k: round(v, 3) for k, v in got.items()}}
    if top and ALLOCATED in got and peaks[top]:
        out["allocated_vs_planned"] = round(got[ALLOCATED] * GIB / peaks[top] - 1, 4)
    return out


def lines(result: Mapping[str, Any]) -> list[str]:
    """The report's text for one comparison."""
    if "error" in result:
        return [f"memory: not planned ({result['error']})"]
    planned = ", ".join(f"{k} {v:.2f}" for k, v in result["planned_gib"].items())
    got = ", ".join(f"{k.split('/')[-1]} {v:.2f}" for k, v in result["measured_gib"].items()) or "no memory metrics"
    diff = result.get("allocated_vs_planned")
    tail = f"; measured allocated {diff:+.1%} of the planned {result['planned_peak_phase']}" if diff is not None else ""
    return [f"memory ({result['device']}): planned trainer peak GiB: {planned}; measured GiB: {got}{tail}"]


def compare_config(config: Any, values: Mapping[int, Mapping[str, Any]], environ=None) -> dict[str, Any]:
    """``compare`` for a run's config (a plain mapping or OmegaConf); a config the plan cannot use gives
    ``{"error": why}`` so a report still shows the rest."""
    from omegaconf import OmegaConf

    from verl_ascend.memory.plan import plan
    from verl_ascend.memory.terms import PlanInputError

    try:
        config = config if OmegaConf.is_config(config) else OmegaConf.create(dict(config))
        return compare(plan(config, environ or {}), values)
    except (PlanInputError, ValueError) as exc:
        return {"error": str(exc)}
