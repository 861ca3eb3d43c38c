"""The after-step check: a trace that was asked for and is not on disk is reported loudly, with the
reason that fits the config; under strict it stops the run."""

from __future__ import annotations

import os
import time

import pytest

from verl_ascend.run.trace_check import (
    MissingTraceError,
    attach_trace_check,
    MissingTraceWarning,
    TraceCheck,
    check_traces,
    config_reasons,
    expected_traces,
    find_traces,
)


def _config(save_path, **over):
    cfg = {
        "global_profiler": {"tool": "torch", "steps": [2], "save_path": str(save_path)},
        "trainer": {"nnodes": 1, "n_gpus_per_node": 2},
        "actor_rollout_ref": {
            "actor": {"profiler": {"enable": True, "ranks": [0], "all_ranks": False,
                                   "tool_config": {"torch": {"discrete": True}}}},
            "rollout": {"name": "vllm", "tensor_model_parallel_size": 1,
                        "profiler": {"enable": True, "ranks": [0], "all_ranks": False,
                                     "tool_config": {"torch": {"discrete": True}}}},
        },
    }
    for dotted, value in over.items():
        node = cfg
        *parts, last = dotted.split(".")
        for p in parts:
            node = node[p]
        node[last] = value
    return cfg


def test_missing_directory_warns_with_reason(tmp_path, capsys):
    missing = tmp_path / "never_written"
    with pytest.warns(MissingTraceWarning) as rec:
        problems = check_traces(missing, 2, ["train", "rollout"], config=_config(missing))
    assert len(problems) == 2 and len(rec) == 2
    assert all(f"{missing} does not exist" in p for p in problems)
    assert "the rollout trace" in problems[1] and "VLLM_TORCH_PROFILER_DIR" in problems[1]
    err = capsys.readouterr().err
    assert "!!!!" in err and "[verl-ascend profiler] step 2" in err


def test_strict_raises(tmp_path):
    with pytest.raises(MissingTraceError) as info:
        check_traces(tmp_path / "nope", 2, ["train"], strict=True, config=_config(tmp_path / "nope"))
    assert "the train trace that was asked for is missing" in str(info.value)


def test_known_config_reasons(tmp_path):
    cfg = _config(tmp_path, **{"actor_rollout_ref.rollout.profiler.tool_config.torch.discrete": False})
    assert any("discrete is False" in r for r in config_reasons(cfg, "rollout", 2))
    assert any("step 3 is not in global_profiler.steps" in r for r in config_reasons(cfg, "rollout", 3))
    cfg = _config(tmp_path, **{"actor_rollout_ref.rollout.profiler.ranks": [8]})
    assert any("map to replica(s) [8]" in r and "only 2 replica(s)" in r for r in config_reasons(cfg, "rollout", 2))
    cfg = _config(tmp_path, **{"actor_rollout_ref.actor.profiler.ranks": [5, 6]})
    assert any("outside the 2 training ranks" in r for r in config_reasons(cfg, "train", 2))
    cfg = _config(tmp_path, **{"global_profiler.tool": "nsys"})
    assert any("dropped" in r for r in config_reasons(cfg, "rollout", 2))
    assert config_reasons(_config(tmp_path), "rollout", 2) == []


def test_reason_reaches_the_message(tmp_path):
    cfg = _config(tmp_path, **{"actor_rollout_ref.rollout.profiler.tool_config.torch.discrete": False})
    with pytest.warns(MissingTraceWarning):
        (msg,) = check_traces(tmp_path, 2, ["rollout"], config=cfg)
    assert "nothing new under" in msg and "discrete is False" in msg


def test_present_traces_pass(tmp_path):
    (tmp_path / "actor_rollout_actor_update_step2_rank0_pid1_x.json.gz").write_bytes(b"x")
    rdir = tmp_path / "agent_loop_rollout_replica_0"
    rdir.mkdir()
    (rdir / "host.123.pt.trace.json.gz").write_bytes(b"x")
    assert check_traces(tmp_path, 2, ["train", "rollout"], since=time.time() - 10) == []


def test_a_trace_of_another_step_does_not_count(tmp_path):
    (tmp_path / "actor_rollout_actor_update_step1_rank0_pid1_x.json.gz").write_bytes(b"x")
    assert find_traces(tmp_path, "train", step=2) == []
    assert len(find_traces(tmp_path, "train", step=1)) == 1


def test_old_files_do_not_count_for_a_new_step(tmp_path):
    rdir = tmp_path / "agent_loop_rollout_replica_0"
    rdir.mkdir()
    old = rdir / "host.1.pt.trace.json.gz"
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert find_traces(tmp_path, "rollout", step=2, since=time.time() - 5) == []
    assert find_traces(tmp_path, "rollout", step=2) == [old]


def test_hook_around_steps(tmp_path):
    cfg = _config(tmp_path)
    cfg["profile_check"] = {"enable": True, "strict": False}
    hook = TraceCheck.from_config(cfg)
    assert hook.expected == ["train", "rollout"]
    hook.before_step(1)
    assert hook.after_step(1) == []  # not a profiled step: nothing checked
    hook.before_step(2)
    (tmp_path / "actor_rollout_actor_update_step2_rank0_pid1_x.json.gz").write_bytes(b"x")
    with pytest.warns(MissingTraceWarning):
        problems = hook.after_step(2)
    assert len(problems) == 1 and "rollout" in problems[0]

    cfg["profile_check"]["strict"] = True
    strict = TraceCheck.from_config(cfg)
    strict.before_step(2)
    with pytest.raises(MissingTraceError):
        strict.after_step(2)


def test_hook_is_off_when_nothing_is_profiled(tmp_path):
    assert TraceCheck.from_config(_config(tmp_path, **{"global_profiler.tool": None})) is None
    assert TraceCheck.from_config(_config(tmp_path, **{"global_profiler.steps": None})) is None
    cfg = _config(tmp_path)
    cfg["profile_check"] = {"enable": False}
    assert TraceCheck.from_config(cfg) is None
    cfg = _config(tmp_path, **{"actor_rollout_ref.rollout.profiler.enable": False})
    assert expected_traces(cfg) == ["train"]


def test_continuous_steps_wait_for_the_last_one(tmp_path):
    cfg = _config(tmp_path, **{"global_profiler.steps": [2, 3], "global_profiler.profile_continuous_steps": True})
    hook = TraceCheck(cfg, expected=["train"])
    hook.before_step(2)
    assert hook.after_step(2) == []  # the shared trace is written at the end of step 3
    hook.before_step(3)
    (tmp_path / "actor_rollout_train_step2_rank0_pid1_x.json.gz").write_bytes(b"x")
    assert hook.after_step(3) == []


def test_unknown_kind_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="not known"):
        check_traces(tmp_path, 1, ["trian"])


class _FakeTrainer:
    """The two calls upstream's fit() makes around each step, and the step counter they read."""

    def __init__(self, config, save_path):
        self.config = config
        self.save_path = save_path
        self.global_steps = 0
        self.calls = []

    def _start_profiling(self):
        self.calls.append(("start", self.global_steps))

    def _stop_profiling(self):
        self.calls.append(("stop", self.global_steps))
        if self.global_steps == 2:  # the profiler writes its trace when it stops
            (self.save_path / f"actor_rollout_actor_update_step{self.global_steps}_rank0_x.json.gz").write_bytes(b"x")

    def fit(self, steps):
        for self.global_steps in range(1, steps + 1):
            self._start_profiling()
            self._stop_profiling()


def test_attach_wraps_one_trainer_instance(tmp_path):
    cfg = _config(tmp_path, **{"actor_rollout_ref.rollout.profiler.enable": False})
    trainer = _FakeTrainer(cfg, tmp_path)
    hook = attach_trace_check(trainer)
    assert hook is not None and hook.expected == ["train"]
    trainer.fit(3)  # step 2 is profiled and its trace appears: no warning
    assert trainer.calls == [("start", 1), ("stop", 1), ("start", 2), ("stop", 2), ("start", 3), ("stop", 3)]
    assert "_start_profiling" not in vars(_FakeTrainer(cfg, tmp_path))  # the class is untouched


def test_attach_reports_a_missing_trace(tmp_path):
    cfg = _config(tmp_path / "elsewhere")
    cfg["profile_check"] = {"strict": True}
    trainer = _FakeTrainer(cfg, tmp_path)
    attach_trace_check(trainer, cfg)
    with pytest.raises(MissingTraceError, match="step 2"):
        trainer.fit(3)
    assert attach_trace_check(_FakeTrainer(_config(tmp_path, **{"global_profiler.tool": None}), tmp_path)) is None


# ------------------------------------------------------------------------------ asynchronous modes
def _separate(save_path, **over):
    """separate_async on one trainer device and a rollout pool of two replicas (upstream: replicas 1 and 2)."""
    cfg = _config(save_path, **over)
    cfg["trainer"]["n_gpus_per_node"] = 1
    cfg["trainer"]["v1"] = {"trainer_mode": "separate_async"}
    cfg["actor_rollout_ref"]["rollout"].update(nnodes=1, n_gpus_per_node=2)
    for dotted, value in over.items():  # again: the lines above may have overwritten an override
        node = cfg
        *parts, last = dotted.split(".")
        for p in parts:
            node = node[p]
        node[last] = value
    return cfg


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_pools_follow_upstreams_replica_numbering(tmp_path):
    from verl_ascend.run.trace_check import pools

    geometry = pools(_separate(tmp_path))
    assert (geometry.trainer, geometry.rollout, geometry.first_pool_rank) == (range(0, 1), range(1, 3), 1)
    tp2 = pools(_separate(tmp_path, **{"trainer.n_gpus_per_node": 4, "actor_rollout_ref.rollout.n_gpus_per_node": 4,
                                       "actor_rollout_ref.rollout.tensor_model_parallel_size": 2}))
    assert (tp2.trainer, tp2.rollout, tp2.first_pool_rank) == (range(0, 2), range(2, 4), 4)
    no_hybrid = pools(_separate(tmp_path, **{"actor_rollout_ref.hybrid_engine": False}))
    assert (no_hybrid.trainer, no_hybrid.rollout) == (range(0, 0), range(0, 2))
    assert pools(_config(tmp_path)).rollout == range(0)  # sync: no rollout pool


def test_separate_async_expects_the_rollout_pools_trace(tmp_path):
    assert expected_traces(_config(tmp_path)) == ["train", "rollout"]  # sync: unchanged
    colocate = _config(tmp_path)
    colocate["trainer"]["v1"] = {"trainer_mode": "colocate_async"}
    assert expected_traces(colocate) == ["train", "rollout"]  # one pool, as sync
    assert expected_traces(_separate(tmp_path)) == ["train", "rollout", "rollout_pool"]  # ranks [0]: replica 0 too
    every = _separate(tmp_path, **{"actor_rollout_ref.rollout.profiler.all_ranks": True})
    assert expected_traces(every) == ["train", "rollout", "rollout_pool"]
    only_pool = _separate(tmp_path, **{"actor_rollout_ref.rollout.profiler.ranks": [2]})
    assert expected_traces(only_pool) == ["train", "rollout_pool"]
    assert config_reasons(only_pool, "rollout_pool", 2) == [] and config_reasons(every, "rollout_pool", 2) == []


def test_a_profiler_that_selects_no_pool_replica_is_named(tmp_path):
    cfg = _separate(tmp_path)  # ranks [0]: the trainer pool's hybrid replica only
    (reason,) = config_reasons(cfg, "rollout_pool", 2)
    assert "the rollout pool's replicas are 1..2" in reason and "add 1 to actor_rollout_ref.rollout.profiler.ranks" in reason
    empty = _separate(tmp_path, **{"actor_rollout_ref.rollout.n_gpus_per_node": 0})
    assert "make no rollout-pool replica" in config_reasons(empty, "rollout_pool", 2)[0]
    assert "only separate_async" in config_reasons(_config(tmp_path), "rollout_pool", 2)[0]


def test_pool_traces_are_told_apart_by_replica(tmp_path):
    cfg = _separate(tmp_path, **{"actor_rollout_ref.rollout.profiler.all_ranks": True})
    since = time.time() - 10
    _touch(tmp_path / "actor_rollout_actor_update_step2_rank0_pid1_x.json.gz")
    _touch(tmp_path / "agent_loop_rollout_replica_0" / "hf_rollout_step2_rank0.json")
    with pytest.warns(MissingTraceWarning):
        (msg,) = check_traces(tmp_path, 2, expected_traces(cfg), since=since, config=cfg)
    assert "the rollout_pool trace" in msg and "r in 1..2: the rollout pool's servers" in msg
    _touch(tmp_path / "agent_loop_rollout_replica_2" / "hf_rollout_step2_rank2.json")
    assert check_traces(tmp_path, 2, expected_traces(cfg), since=since, config=cfg) == []


class _FakeSeparateAsync(_FakeTrainer):
    """upstream's separate_async order: the rollout servers stop in on_step_end, after _stop_profiling."""

    def _stop_rollout_profiling(self):
        self.calls.append(("stop_rollout", self.global_steps))
        if self.global_steps == 2:
            _touch(self.save_path / "agent_loop_rollout_replica_1" / "hf_rollout_step2_rank1.json")

    def fit(self, steps):
        for self.global_steps in range(1, steps + 1):
            self._start_profiling()
            self._stop_profiling()
            if self.global_steps == 2:  # on_step_end: prev_step_profile
                self._stop_rollout_profiling()


def test_attach_checks_the_pool_after_upstream_stops_its_servers(tmp_path):
    cfg = _separate(tmp_path, **{"actor_rollout_ref.rollout.profiler.ranks": [1]})
    cfg["profile_check"] = {"strict": True}
    trainer = _FakeSeparateAsync(cfg, tmp_path)
    hook = attach_trace_check(trainer)
    assert hook.expected == ["train", "rollout_pool"] and hook.late == ["rollout_pool"]
    trainer.fit(3)  # strict: a check before the servers stopped would have raised
    assert ("stop_rollout", 2) in trainer.calls

    elsewhere = _separate(tmp_path / "other", **{"actor_rollout_ref.rollout.profiler.ranks": [1]})
    hook = TraceCheck(elsewhere, strict=True)
    hook.before_step(2)
    _touch(tmp_path / "other" / "actor_rollout_actor_update_step2_rank0_x.json.gz")
    assert hook.after_step(2) == []  # the train trace is there; the pool's is not due yet
    with pytest.raises(MissingTraceError, match="rollout_pool"):
        hook.after_rollout_stop(2)
    assert hook.after_rollout_stop(3) == []  # nothing pending


def test_a_rollout_trace_named_after_its_weights_version_counts_by_time(tmp_path):
    # Upstream's separate_async passes no step to the servers: verl.cpu's hf server then names the version
    # of its weights (real run: hf_rollout_step1_rank1.json for the profiled step 2).
    new = _touch(tmp_path / "agent_loop_rollout_replica_1" / "hf_rollout_step1_rank1.json")
    assert find_traces(tmp_path, "rollout", step=2, since=time.time() - 10) == [new]
    os.utime(new, (time.time() - 3600, time.time() - 3600))
    assert find_traces(tmp_path, "rollout", step=2, since=time.time() - 10) == []  # an old one does not
    assert find_traces(tmp_path, "rollout", step=2) == []  # without a start time the name decides
