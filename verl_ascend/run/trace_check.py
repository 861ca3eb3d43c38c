"""After a profiled step: is every trace that was asked for on disk? If not, say so loudly, and why.

Why: in upstream verl a profiling request that cannot be honoured produces nothing, silently -- the
rollout server profiles only in discrete mode, vLLM skips ``start_profile`` when it was given no
profiler directory (upstream #4206, RFC #4207), ranks outside the world or steps outside
``global_profiler.steps`` record nothing. A user finds out hours later, with an empty directory.
This check runs in the driver after each profiled step, looks at ``global_profiler.save_path``, and
for each missing kind of trace prints a banner with the reasons that fit the config -- a warning by
default, :class:`MissingTraceError` under ``profile_check.strict=True``.

Use from a trainer (see ``docs/ascend_tutorial/profiling.md``)::

    attach_trace_check(trainer, config)        # wraps this trainer's _start/_stop_profiling

or by hand::

    hook = TraceCheck.from_config(config)      # None when profiling is off or the check disabled
    hook.before_step(step)                     # records the time; traces must be newer
    ...run the step...
    hook.after_step(step)                      # -> list of problems; warns or raises
    hook.after_rollout_stop(step)              # separate_async: the rollout kinds, once the servers stopped

or directly: ``check_traces(save_path, step, ["train", "rollout"], strict=False, config=config)``.

Asynchronous modes (upstream's trainer mode, ``verl_ascend/trainer_mode.py``): ``colocate_async`` profiles as ``sync``
does (one pool; the servers stop at the end of sampling). ``separate_async`` has two pools: the trainer
pool (the actor, and the hybrid rollout replicas colocated with it) and the standalone rollout pool,
whose replicas upstream numbers after the hybrid ones. There the check also expects the kind
``rollout_pool`` -- a trace of at least one of the rollout pool's servers -- and the rollout kinds are
checked when upstream stops the servers, in ``on_step_end`` after ``_stop_profiling``: a trainer
calls :meth:`TraceCheck.after_rollout_stop` after ``_stop_rollout_profiling`` (``attach_trace_check``
wraps both).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from verl_ascend import trainer_mode
from verl_ascend.sections import Section, boolean, key

logger = logging.getLogger(__name__)

KINDS = ("train", "rollout", "rollout_pool")
ROLLOUT_KINDS = ("rollout", "rollout_pool")
ROLLOUT_TOOLS = ("torch", "npu")
_ROLLOUT_DIR = re.compile(r"(?:agent_loop_rollout_replica_|rollout-replica|rollout_replica_?)(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".db", ".csv", ".nsys-rep", ".pickle")
_REPORT_DIR = "profile_report"
_SLACK_S = 2.0  # file system timestamps vs the driver's clock


class MissingTraceError(RuntimeError):
    """A trace asked for by the run's profiler config was not written (profile_check.strict=True)."""


class MissingTraceWarning(UserWarning):
    """A trace asked for by the run's profiler config was not written."""


# ================================================================================================ config access
_MISSING = object()


@dataclass(frozen=True)
class ProfileCheckOptions(Section):
    """``profile_check.*`` (the recipe's profile configs): check that each asked-for trace was written."""

    SECTION = "profile_check"

    enable: bool = key(True, "true or false", boolean)  # off: no check at all
    strict: bool = key(False, "true or false", boolean)  # a missing trace fails the step instead of a loud warning


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    """``dotted`` from an OmegaConf config (interpolations resolved) or a plain nested mapping."""
    if config is None:
        return default
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            value = OmegaConf.select(config, dotted, default=_MISSING)
            if value is _MISSING:
                return default
            return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    except ImportError:  # pragma: no cover - omegaconf comes with upstream verl
        pass
    node = config
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            node = getattr(node, part, _MISSING) if not isinstance(node, dict) else _MISSING
        if node is _MISSING:
            return default
    return node


def _role_key(kind: str) -> str:
    return "actor_rollout_ref.rollout" if kind in ROLLOUT_KINDS else "actor_rollout_ref.actor"


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _world(config: Any) -> Optional[int]:
    nnodes = _get(config, "trainer.nnodes")
    per_node = _get(config, "trainer.n_gpus_per_node")
    try:
        return int(nnodes) * int(per_node)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Pools:
    """Rollout replica indices per pool, as upstream numbers them (``agent_loop_rollout_replica_<r>``).

    ``trainer``: the replicas colocated with training (every mode; none in ``separate_async`` with
    ``actor_rollout_ref.hybrid_engine=False``); ``rollout``: ``separate_async``'s standalone rollout
    pool, created with ``start_rank`` = the number of trainer-pool replicas (empty in other modes).
    ``replica_world``: devices per replica (TP x DP x PP); replica ``r`` owns global ranks
    ``[r * replica_world, (r + 1) * replica_world)``.
    """

    trainer: range
    rollout: range
    replica_world: int

    @property
    def first_pool_rank(self) -> int:
        """The global rank owned by the rollout pool's first replica (what ``profiler.ranks`` must name)."""
        return self.rollout.start * self.replica_world


def pools(config: Any) -> Optional[Pools]:
    """The two pools' replica ranges from the config, or None without a trainer world size."""
    world = _world(config)
    if world is None:
        return None
    replica_world = 1
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
        replica_world *= max(_int(_get(config, f"actor_rollout_ref.rollout.{key}", 1) or 1, 1), 1)
    where = trainer_mode.placement(config)
    n_trainer = max(world // replica_world, 1) if where.trainer_rollout else 0
    n_pool = 0
    if where.rollout_pool:
        devices = _int(_get(config, "actor_rollout_ref.rollout.nnodes")) * _int(
            _get(config, "actor_rollout_ref.rollout.n_gpus_per_node"))
        n_pool = max(devices // replica_world, 0)
    return Pools(range(n_trainer), range(n_trainer, n_trainer + n_pool), replica_world)


def profiled_replicas(config: Any, geometry: Optional[Pools] = None) -> Optional[set[int]]:
    """Replica indices the rollout profiler selects (upstream's build_rollout_dist_profiler: a replica
    is profiled when it owns one of ``ranks``; empty ranks: replica 0); None: every replica."""
    role = "actor_rollout_ref.rollout"
    if bool(_get(config, f"{role}.profiler.all_ranks", False)):
        return None
    geometry = geometry or pools(config)
    replica_world = geometry.replica_world if geometry else 1
    ranks = _get(config, f"{role}.profiler.ranks") or [0]
    return {_int(r) // replica_world for r in ranks}


def expected_traces(config: Any) -> list[str]:
    """The kinds of trace the config asks for: "train" when the actor profiler is enabled, "rollout"
    when the rollout profiler is (it follows the actor's unless set). In ``separate_async`` the
    rollout profiler asks for "rollout_pool" (the standalone pool's servers, where that mode samples)
    and for "rollout" only when it selects a replica of the trainer pool."""
    if not _get(config, "global_profiler.tool"):
        return []
    out = ["train"] if bool(_get(config, "actor_rollout_ref.actor.profiler.enable", False)) else []
    if not bool(_get(config, "actor_rollout_ref.rollout.profiler.enable", False)):
        return out
    if not trainer_mode.placement(config).rollout_pool:
        return out + ["rollout"]
    geometry = pools(config)
    selected = profiled_replicas(config, geometry)
    if geometry is None or selected is None or selected & set(geometry.trainer):
        out.append("rollout")
    return out + ["rollout_pool"]


def replicas_of(config: Any, kind: str) -> Optional[range]:
    """The replica indices whose traces count for ``kind`` (None: any replica)."""
    if kind not in ROLLOUT_KINDS or not trainer_mode.placement(config).rollout_pool:
        return None
    geometry = pools(config)
    if geometry is None:
        return None
    return geometry.rollout if kind == "rollout_pool" else geometry.trainer


def config_reasons(config: Any, kind: str, step: Optional[int] = None) -> list[str]:
    """Reasons, read from the config, why no ``kind`` trace will be written for ``step``."""
    if config is None:
        return []
    reasons = []
    role = _role_key(kind)
    tool = _get(config, "global_profiler.tool")
    steps = _get(config, "global_profiler.steps")
    if not tool:
        reasons.append("global_profiler.tool is null: no profiler runs at all")
    if step is not None and (not steps or step not in list(steps)):
        reasons.append(f"step {step} is not in global_profiler.steps={steps}: nothing is collected for it")
    if not _get(config, f"{role}.profiler.enable", False):
        reasons.append(f"{role}.profiler.enable is False")
    save_path = _get(config, "global_profiler.save_path")
    if not save_path:
        reasons.append("global_profiler.save_path is empty: there is nowhere to write")
    role_tool = _get(config, f"{role}.profiler.tool") or tool
    world = _world(config)
    ranks = _get(config, f"{role}.profiler.ranks") or []
    all_ranks = bool(_get(config, f"{role}.profiler.all_ranks", False))
    if kind in ROLLOUT_KINDS:
        if role_tool and role_tool not in ROLLOUT_TOOLS:
            reasons.append(f"rollout servers profile only with tool {ROLLOUT_TOOLS}; tool={role_tool!r} is dropped "
                           "with a log line (upstream vllm_async_server)")
        if role_tool and not _get(config, f"{role}.profiler.tool_config.{role_tool}.discrete", False):
            reasons.append(f"{role}.profiler.tool_config.{role_tool}.discrete is False: upstream's rollout server "
                           "traces the engine only in discrete mode (vllm_async_server._should_profile); set it True")
        geometry = pools(config)
        if kind == "rollout_pool":
            reasons.extend(_pool_reasons(config, geometry, ranks, all_ranks))
        elif ranks and not all_ranks and geometry:
            replica_world = geometry.replica_world
            replicas = len(geometry.trainer) + len(geometry.rollout)
            owned = sorted({int(r) // replica_world for r in ranks})
            if not any(r < replicas for r in owned):
                reasons.append(f"{role}.profiler.ranks={list(ranks)} map to replica(s) {owned} (rank // {replica_world} "
                               f"GPUs per replica) but only {replicas} replica(s) exist: no replica is profiled")
    elif ranks and not all_ranks and world and not any(0 <= int(r) < world for r in ranks):
        reasons.append(f"{role}.profiler.ranks={list(ranks)} are all outside the {world} training ranks")
    return reasons


def _pool_reasons(config: Any, geometry: Optional[Pools], ranks: list, all_ranks: bool) -> list[str]:
    role = "actor_rollout_ref.rollout"
    where = trainer_mode.placement(config)
    if not where.rollout_pool:
        return [f"{trainer_mode.KEY}={where.mode} has no separate rollout pool (only separate_async does)"]
    if geometry is None:
        return []
    if not len(geometry.rollout):
        return [f"{role}.nnodes x {role}.n_gpus_per_node = {_get(config, f'{role}.nnodes')} x "
                f"{_get(config, f'{role}.n_gpus_per_node')} devices make no rollout-pool replica of "
                f"{geometry.replica_world} device(s)"]
    selected = profiled_replicas(config, geometry)
    if selected is not None and not selected & set(geometry.rollout):
        first, last = geometry.rollout.start, geometry.rollout.stop - 1
        return [f"{role}.profiler.ranks={list(ranks) or [0]} select replica(s) {sorted(selected)}, on the trainer pool; "
                f"the rollout pool's replicas are {first}..{last} (upstream numbers them after the trainer pool's), "
                f"owning global ranks from {geometry.first_pool_rank}: add {geometry.first_pool_rank} to "
                f"{role}.profiler.ranks or set {role}.profiler.all_ranks=True"]
    return []


def _possible_reasons(config: Any, kind: str, save_path: Path) -> list[str]:
    """Reasons that cannot be read from the config but are known to produce nothing, silently."""
    out = []
    if kind in ROLLOUT_KINDS:
        name = _get(config, "actor_rollout_ref.rollout.name", "") if config is not None else ""
        if name in ("vllm", "", None):
            out.append("vLLM records only when it was given a profiler directory: vLLM < 0.13 reads "
                       "VLLM_TORCH_PROFILER_DIR in the engine process (an engine spawned before verl sets it, or with "
                       "a cleaned environment, never sees it), vLLM >= 0.13 reads --profiler-config; otherwise "
                       "start_profile does nothing and says nothing (upstream #4206 / RFC #4207)")
        if name == "sglang":
            out.append("SGLang writes its trace only when the server accepted start_profile (check its log)")
        if name == "hf":
            out.append("the HF rollout server (verl.cpu) writes only when its replica is selected by the rollout "
                       "profiler ranks and the tool is torch")
        out.append("traces are written on the node that hosts the profiled replica; look there if this is another node")
    else:
        out.append("traces are written on the node that hosts the profiled rank; look there if this is another node")
        out.append("the worker failed before stop_profile (look for '[Profiler]' lines in the worker logs)")
    if not save_path.is_absolute():
        out.append(f"save_path {str(save_path)!r} is relative: Ray workers resolve it against their own working "
                   "directory; use an absolute path")
    return out


# ================================================================================================ disk
def _rollout_replica(rel: str) -> Optional[int]:
    m = _ROLLOUT_DIR.search(rel)
    return int(m.group(1)) if m else None


def find_traces(save_path: str | Path, kind: str, step: Optional[int] = None, since: Optional[float] = None,
                replicas: Optional[range] = None) -> list[Path]:
    """Trace files of ``kind`` under ``save_path``, newer than ``since`` (epoch seconds) when given.

    A torch training trace names its step (``..._step<n>_rank<r>_...``); a file that names another
    step does not count for ``step``. Engine traces and torch_npu directories carry no step, so the
    time is what ties them to it. ``replicas``: for the rollout kinds, only those replicas'
    directories count (:func:`replicas_of`).
    """
    root = Path(save_path)
    if not root.is_dir():
        return []
    found = []
    step_re = re.compile(r"(?:^|[_.-])step[-_]?(\d+)(?:$|[_.-])", re.IGNORECASE)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != _REPORT_DIR]
        for name in filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            replica = _rollout_replica(rel)
            if (kind in ROLLOUT_KINDS) != (replica is not None):
                continue
            if replicas is not None and replica not in replicas:
                continue
            if not (name.lower().endswith(_TRACE_SUFFIXES) or "_ascend_pt" in rel or "PROF_" in rel):
                continue
            m = step_re.search(name)
            # A rollout server names the step it was told, else the version of its weights (upstream's
            # _start_rollout_profiling tells it nothing; in the async modes that version lags the
            # trainer's step): with a start time, the time ties a rollout trace to the step.
            by_time = kind in ROLLOUT_KINDS and since is not None
            if step is not None and m and int(m.group(1)) != step and not by_time:
                continue
            if since is not None and (by_time or not (m and step is not None)):
                try:
                    if full.stat().st_mtime < since - _SLACK_S:
                        continue
                except OSError:
                    continue
            found.append(full)
    return found


# ================================================================================================ check
def _announce(messages: list[str], strict: bool) -> None:
    bar = "!" * 100
    text = "\n".join([bar] + [f"[verl-ascend profiler] {m}" for m in messages] + [bar])
    print(text, file=sys.stderr, flush=True)
    for m in messages:
        logger.error(m)
        if not strict:
            warnings.warn(m, MissingTraceWarning, stacklevel=3)


def check_traces(
    save_path: str | Path,
    step: int,
    expected: list[str],
    strict: bool = False,
    *,
    since: Optional[float] = None,
    config: Any = None,
) -> list[str]:
    """Check that each kind in ``expected`` ("train", "rollout", "rollout_pool") has a trace for ``step`` on disk.

    Returns one message per missing kind (empty when all are there). Each message names the
    directory, what asked for the trace and the reasons that fit: first those read from ``config``,
    then the known silent failures. Messages are printed to stderr in a banner, logged as errors and
    issued as :class:`MissingTraceWarning`; with ``strict`` a :class:`MissingTraceError` is raised
    instead of the warnings.
    """
    unknown = [k for k in expected if k not in KINDS]
    if unknown:
        raise ValueError(f"expected kinds {unknown} are not known; use a subset of {list(KINDS)}")
    root = Path(save_path) if save_path else Path("")
    messages = []
    for kind in expected:
        replicas = replicas_of(config, kind)
        if find_traces(root, kind, step=step, since=since, replicas=replicas):
            continue
        dirs = ""
        if kind in ROLLOUT_KINDS:
            dirs = (" (in agent_loop_rollout_replica_*/)" if replicas is None else
                    f" (in agent_loop_rollout_replica_<r>/, r in {replicas.start}..{replicas.stop - 1}: the "
                    f"{'rollout' if kind == 'rollout_pool' else 'trainer'} pool's servers)" if len(replicas) else
                    " (this pool has no rollout replica)")
        where = (f"{root} does not exist: nothing was written there by any role" if not root.is_dir()
                 else f"nothing new under {root}" + dirs)
        reasons = config_reasons(config, kind, step) or _possible_reasons(config, kind, root)
        numbered = " ".join(f"({i}) {r}." for i, r in enumerate(reasons, 1))
        messages.append(f"step {step}: the {kind} trace that was asked for is missing -- {where}. "
                        f"Likely reason{'s' if len(reasons) > 1 else ''}: {numbered}")
    if messages:
        _announce(messages, strict)
        if strict:
            raise MissingTraceError("\n".join(messages))
    return messages


class TraceCheck:
    """The per-step hook a trainer calls around each step (see the module docstring)."""

    def __init__(self, config: Any, strict: bool = False, expected: Optional[list[str]] = None):
        self.config = config
        self.strict = strict
        self.save_path = _get(config, "global_profiler.save_path") or ""
        self.steps = set(_get(config, "global_profiler.steps") or [])
        self.continuous = bool(_get(config, "global_profiler.profile_continuous_steps", False))
        self.expected = expected if expected is not None else expected_traces(config)
        # separate_async stops the rollout servers in on_step_end, after _stop_profiling: their
        # kinds wait for after_rollout_stop. Other modes stop them inside the step.
        separate = trainer_mode.placement(config).rollout_pool
        self.late = [k for k in self.expected if k in ROLLOUT_KINDS] if separate else []
        self._since: dict[int, float] = {}
        self._pending: dict[int, tuple[int, Optional[float]]] = {}

    @classmethod
    def from_config(cls, config: Any) -> Optional["TraceCheck"]:
        """None when nothing is profiled or ``profile_check.enable`` is False."""
        options = ProfileCheckOptions.from_config(config)
        if not options.enable:
            return None
        expected = expected_traces(config)
        if not expected or not _get(config, "global_profiler.steps"):
            return None
        return cls(config, strict=options.strict, expected=expected)

    def before_step(self, step: int) -> None:
        if step in self.steps:
            self._since[step] = time.time()

    def after_step(self, step: int) -> list[str]:
        if step not in self.steps:
            return []
        if self.continuous and step + 1 in self.steps:
            return []  # continuous steps share one trace, written when the run of steps ends
        since = self._since.pop(step, None)
        first = step
        if self.continuous:
            # One trace covers the consecutive steps; torch names it after the first of them.
            while first - 1 in self.steps:
                first -= 1
            earlier = [self._since.pop(s) for s in range(first, step) if s in self._since]
            since = min([t for t in [since, *earlier] if t is not None], default=None)
        if self.late:
            self._pending[step] = (first, since)
        now = [k for k in self.expected if k not in self.late]
        return check_traces(self.save_path, first, now, self.strict, since=since, config=self.config) if now else []

    def after_rollout_stop(self, step: int) -> list[str]:
        """The rollout kinds of ``step`` once the servers have stopped (separate_async: after upstream's
        ``_stop_rollout_profiling`` in ``on_step_end``); nothing to do in other modes."""
        pending = self._pending.pop(step, None)
        if pending is None:
            return []
        first, since = pending
        return check_traces(self.save_path, first, self.late, self.strict, since=since, config=self.config)


def attach_trace_check(trainer: Any, config: Any = None) -> Optional[TraceCheck]:
    """Run the check around upstream's per-step profiling calls of one trainer instance.

    Upstream's V1 trainer (``trainer/ppo/v1/trainer_base.py`` ``fit``) calls ``_start_profiling()``
    before and ``_stop_profiling()`` after each step; rollout servers stop earlier, at the end of
    sampling, except in ``separate_async``, where ``on_step_end`` stops them after ``_stop_profiling``
    (``_stop_rollout_profiling``). This wraps those methods *on the given instance* (the class is
    untouched): the time is taken before the profilers start, and the disk is checked once they have
    stopped. Returns the hook, or None when nothing is profiled or ``profile_check.enable`` is False.

    For trainers without the recipe's class (seam ``profiler_trace_check_rebind``, called by a user); it goes
    when upstream's trainer exposes profile-step hooks.
    """
    hook = TraceCheck.from_config(config if config is not None else trainer.config)
    if hook is None:
        return None
    start, stop = trainer._start_profiling, trainer._stop_profiling
    if hook.late:
        stop_rollout = trainer._stop_rollout_profiling

        def _stop_rollout_profiling() -> None:
            stop_rollout()
            hook.after_rollout_stop(trainer.global_steps)

        trainer._stop_rollout_profiling = _stop_rollout_profiling

    def _start_profiling() -> None:
        hook.before_step(trainer.global_steps)
        start()

    def _stop_profiling() -> None:
        step = trainer.global_steps
        stop()
        hook.after_step(step)

    trainer._start_profiling = _start_profiling
    trainer._stop_profiling = _stop_profiling
    return hook
