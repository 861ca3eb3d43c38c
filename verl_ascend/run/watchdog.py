"""Rollout watchdog: a dead or wedged rollout server fails the step with a clear error, never a hang.

Upstream verl 0.9.1 (V1 sync trainer) dispatches prompts to the agent loop fire-and-forget and
then polls TransferQueue every 2 s until enough prompt groups are finished
(``ReplayBuffer.sample``), with no deadline. When a rollout server dies mid-generation the
agent loop marks the groups it served as failed, and the step then either ends in an unrelated
message ("selected terminal groups with no materializable trajectories"), trains on the groups
that happened to finish and fails later pushing weights to the dead actor, or -- with
``trainer.v1.sampler.sync_refill_failed_groups=true`` -- refills the failed prompts forever. A
server that is alive but stuck (hung kernel, deadlock, stopped process) is polled forever.

``RolloutWatchdog`` (a component of the recipe's trainer, attached by its ``_build_replay_buffer``)
wraps the trainer's own replay-buffer instance, no upstream class is patched:

- each poll pings every rollout server (non-blocking); a server whose actor died fails the step
  at once with ``RolloutServerDiedError`` naming the replica, its address and the step;
- the ping runs ``server_health`` inside the server actor (Ray's ``__ray_call__``): a server whose
  actor lives on while its engine died (vLLM's engine-core process killed: vLLM's own monitor
  marks the engine dead within a second) fails the step the same way, naming the engine process
  that died and its pid -- within ``PING_INTERVAL_S`` plus one poll while the step waits for
  rollouts, else when the step ends and pushes weights;
- if no prompt group and no trajectory changed state for ``fault_tolerance.rollout_timeout_s``
  seconds, the step fails with ``RolloutStalledError`` giving the counts (pending, running,
  finished, failed) and which servers did not answer a ping;
- after the batch is sampled, and if pushing the new weights fails, the servers are checked
  again so a death between polls is reported as such, not as a downstream symptom.

There are no retries: a failed step ends the run with a non-zero exit and the clear error, and
running the same command again resumes from the last complete checkpoint (``verl_ascend/run/checkpoints.py``).

Config (top-level section of the recipe's configs, parsed by ``verl_ascend/run/options.py``)::

    fault_tolerance:
      rollout_timeout_s: 1800   # no rollout progress for this long fails the step; 0 = off
      server_ping_timeout_s: 60 # a ping unanswered this long marks a server unresponsive

Seams ``recipe_watchdog_overrides`` (it names each server by the private address of its replica:
``server_address`` is a method only on live replicas), ``recipe_watchdog_engine_probe`` and
``recipe_watchdog_buffer_rebind``: they go when upstream's rollout servers expose a health check that reports
the engine's state and its ``ReplayBuffer`` calls a health callback in its poll loop.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, Optional

from verl_ascend.run.faults import RESUME_ADVICE, RolloutFailure, actor_death, first_line

logger = logging.getLogger(__name__)

# A server that answered a ping is pinged again this much later at the earliest (the replay
# buffer may poll every 0.2 s; a 128-card job has dozens of servers).
PING_INTERVAL_S = 5.0


class RolloutServerDiedError(RolloutFailure):
    pass


class RolloutStalledError(RolloutFailure):
    pass


class RolloutWatchdog:
    """Watches the rollout servers of one trainer while its replay buffer waits for rollouts."""

    @classmethod
    def from_config(cls, config, servers_fn) -> "RolloutWatchdog":
        from verl_ascend.run.options import FaultTolerance

        options = FaultTolerance.from_config(config)
        return cls(servers_fn, options.rollout_timeout_s, options.server_ping_timeout_s)

    def __init__(self, servers_fn, rollout_timeout_s: float, ping_timeout_s: float, clock=time.monotonic):
        self._servers_fn = servers_fn  # () -> list[(label, actor handle)]
        self.rollout_timeout_s = rollout_timeout_s
        self.ping_timeout_s = ping_timeout_s
        self._clock = clock
        self._pings: dict[str, tuple[Any, float]] = {}
        self._children: dict[str, dict[int, str]] = {}  # label -> live child processes at its last healthy answer
        self._answered: dict[str, float] = {}
        self._signature: Optional[tuple] = None
        self._last_progress = clock()
        self._step: Optional[int] = None
        self._partition = "train"

    # -- servers --------------------------------------------------------------------------------
    def servers(self) -> list[tuple[str, Any]]:
        try:
            return list(self._servers_fn())
        except Exception as exc:  # no manager yet (still initialising)
            logger.debug("rollout watchdog: no servers yet: %s", exc)
            return []

    def poll_servers(self, wait_s: float = 0.0, force: bool = False) -> tuple[dict[str, str], dict[str, float]]:
        """Ping the servers without blocking (up to ``wait_s`` for answers); a server that
        answered less than ``PING_INTERVAL_S`` ago is pinged again only with ``force``.

        Returns ``(dead, silent)``: ``{label: error}`` for servers whose actor died and
        ``{label: seconds}`` for pings still unanswered.
        """
        import ray

        now = self._clock()
        servers = self.servers()
        for label, handle in servers:
            recent = now - self._answered.get(label, float("-inf")) < PING_INTERVAL_S
            if label not in self._pings and (force or not recent):
                self._pings[label] = (handle.__ray_call__.remote(server_health), now)
        refs = [ref for ref, _ in self._pings.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        dead, silent = {}, {}
        for label, (ref, sent) in list(self._pings.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                silent[label] = self._clock() - sent
                continue
            del self._pings[label]
            self._answered[label] = self._clock()
            try:
                health = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                dead[label] = actor_death(exc) or first_line(exc)
                continue
            except Exception as exc:  # the ping itself failed: treat as dead, say why
                dead[label] = f"{type(exc).__name__}: {first_line(exc)}"
                continue
            engine_dead = self._engine_dead(label, health)
            if engine_dead:
                dead[label] = engine_dead
        return dead, silent

    def _engine_dead(self, label: str, health: dict) -> Optional[str]:
        """Why ``label``'s engine is dead behind its live server actor, else None (its processes recorded)."""
        before, now = self._children.get(label, {}), health.get("children", {})
        if not health.get("engine_dead"):
            self._children[label] = now
            return None
        exited = [f"{name} (pid {pid}) {_exit(code)}" for pid, name, code in health.get("engines", []) if code is not None]
        gone = exited or [f"{name} (pid {pid}) died" for pid, name in sorted(before.items()) if pid not in now]
        lost = f"engine process {', '.join(gone)}" if gone else "its engine process died (pid unknown)"
        return f"{lost}; the server actor (pid {health.get('pid')}) is alive, its engine reports dead"

    def dead_servers(self, wait_s: float = 5.0) -> dict[str, str]:
        dead, _ = self.poll_servers(wait_s=wait_s, force=True)
        return dead

    # -- progress -------------------------------------------------------------------------------
    def begin(self, step: Optional[int], partition_id: str) -> None:
        self._step, self._partition = step, partition_id
        self._signature = None
        self._last_progress = self._clock()

    @staticmethod
    def _counts(replay_buffer, partition_id: str) -> dict[str, int]:
        return {
            "pending": len(replay_buffer.pending_keys[partition_id]),
            "running": len(replay_buffer.running_keys[partition_id]),
            "finished": len(replay_buffer.finished_keys[partition_id]),
            "failed": len(replay_buffer.failure_keys[partition_id]),
            "trajectories": len(replay_buffer.partitions[partition_id]),
        }

    def check(self, replay_buffer, partition_id: str) -> None:
        """Called at every poll of the replay buffer; raises when the rollout cannot finish."""
        counts = self._counts(replay_buffer, partition_id)
        signature = tuple(sorted(counts.items()))
        now = self._clock()
        if signature != self._signature:
            self._signature = signature
            self._last_progress = now
        dead, silent = self.poll_servers()
        if dead:
            raise RolloutServerDiedError(self._died_message(dead, counts))
        stalled = now - self._last_progress
        if self.rollout_timeout_s > 0 and stalled >= self.rollout_timeout_s:
            unresponsive = {k: v for k, v in silent.items() if v >= min(self.ping_timeout_s, stalled)}
            raise RolloutStalledError(
                f"{self._where()}: no rollout progress for {stalled:.0f} s "
                f"(fault_tolerance.rollout_timeout_s={self.rollout_timeout_s:g}); {_fmt_counts(counts)}; "
                + (
                    "rollout servers not answering a ping: "
                    + ", ".join(f"{k} (silent {v:.0f} s)" for k, v in sorted(unresponsive.items()))
                    if unresponsive
                    else "every rollout server answers pings (generation itself is stuck or too slow)"
                )
            )

    def _where(self) -> str:
        part = "" if self._partition == "train" else f" ({self._partition})"
        return f"step {self._step}{part}" if self._step is not None else f"rollout{part}"

    def _died_message(self, dead: dict[str, str], counts: Optional[dict] = None) -> str:
        names = ", ".join(f"{label} [{why}]" for label, why in sorted(dead.items()))
        tail = f"; {_fmt_counts(counts)}" if counts else ""
        return (
            f"{self._where()}: rollout server died during generation: {names}{tail}. The step is abandoned; "
            + RESUME_ADVICE
        )

    def raise_if_dead(self, cause: Optional[BaseException] = None, wait_s: float = 5.0) -> None:
        dead = self.dead_servers(wait_s=wait_s)
        if dead:
            raise RolloutServerDiedError(self._died_message(dead)) from cause

    def explain_step_end_failure(self, step: Optional[int], cause: BaseException) -> None:
        """The end of a step failed (pushing weights to a dead server fails there): raise
        ``RolloutServerDiedError`` naming the dead server if there is one, else return."""
        self.begin(step, "train")
        self.raise_if_dead(cause=cause)

    # -- wiring ---------------------------------------------------------------------------------
    def attach(self, replay_buffer) -> None:
        """Wrap this replay-buffer *instance*'s ``sample`` and poll wait (the class is untouched)."""
        sample, wait = replay_buffer.sample, replay_buffer._wait_for_next_poll
        watchdog = self

        def watched_sample(*args, **kwargs):
            global_steps = kwargs.get("global_steps", args[0] if args else None)
            partition_id = kwargs.get("partition_id", args[1] if len(args) > 1 else "train")
            watchdog.begin(global_steps, partition_id)
            try:
                result = sample(*args, **kwargs)
            except RolloutFailure:
                raise
            except Exception as exc:
                watchdog.raise_if_dead(cause=exc)
                raise
            watchdog.raise_if_dead(wait_s=2.0)
            return result

        def watched_wait(partition_id, last_debug_time):
            watchdog.check(replay_buffer, partition_id)
            return wait(partition_id, last_debug_time)

        replay_buffer.sample = watched_sample
        replay_buffer._wait_for_next_poll = watched_wait


def server_health(server) -> dict:
    """Runs inside a rollout server actor (sent by ``__ray_call__``): its engine's own verdict
    (vLLM's ``AsyncLLM.errored``, set by vLLM's monitor the moment an engine-core process exits), the
    engine's processes with their exit codes (vLLM's process manager) and the actor's live child
    processes (named when the engine keeps no process list), so a death behind a live actor is named
    by pid and signal. A server without an engine process (the CPU ``hf`` server: its engine runs in
    the actor) reports none."""
    import psutil

    engine = getattr(server, "engine", None)
    children = {}
    try:
        for child in psutil.Process().children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    children[child.pid] = (child.cmdline() or [child.name()])[0][:80]
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return {"pid": os.getpid(), "engine_dead": bool(getattr(engine, "errored", False)), "children": children,
            "engines": _engine_processes(engine)}


def _engine_processes(engine) -> list[tuple[int, str, Optional[int]]]:
    """(pid, name, exit code or None) of vLLM's engine-core processes
    (``AsyncLLM.engine_core.resources.engine_manager.processes``); empty for any other engine."""
    manager = getattr(getattr(getattr(engine, "engine_core", None), "resources", None), "engine_manager", None)
    found = []
    for proc in getattr(manager, "processes", None) or []:
        try:
            found.append((proc.pid, proc.name, proc.exitcode))
        except Exception:  # a process object of another kind: skip it, the children still name it
            continue
    return found


def _exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _fmt_counts(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def rollout_servers(trainer) -> list[tuple[str, Any]]:
    """``(label, handle)`` of every rollout server of ``trainer``'s LLM server managers."""
    out = []
    for manager in trainer._rollout_server_managers():
        for replica in manager.get_replicas():
            address = getattr(replica, "_server_address", None)
            for i, handle in enumerate(getattr(replica, "servers", None) or []):
                label = f"replica {replica.replica_rank}"
                if len(replica.servers) > 1:
                    label += f" server {i}"
                if address:
                    label += f" ({address})"
                out.append((label, handle))
    return out
