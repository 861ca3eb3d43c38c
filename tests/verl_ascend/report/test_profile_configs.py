"""The `profile` config group composes with the recipe's configs on upstream's ppo_trainer, sets
upstream 0.9.1's profiler keys so that its own dataclasses accept them, and asks for nothing that the
trace check would flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl_ascend.run.trace_check import TraceCheck, config_reasons, expected_traces

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "dapo_ascend" / "config")
PROFILES = sorted(p.stem for p in (Path(CONFIG_DIR) / "profile").glob("*.yaml"))
# The CPU profile goes with the tiny CPU config; every profile must compose with the NPU job.
COMBOS = [("dapo_tiny_cpu", "cpu")] + [("dapo_qwen25_32b_npu", p) for p in PROFILES]


def _compose(primary: str, profile: str | None, extra=()):
    overrides = ([f"+profile={profile}"] if profile else []) + list(extra)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=primary, overrides=overrides)


@pytest.fixture(scope="module")
def composed():
    # Compose each once: Hydra composition of upstream's full trainer config is not free.
    out = {(primary, None): _compose(primary, None) for primary in ("dapo_tiny_cpu", "dapo_qwen25_32b_npu")}
    for primary, profile in COMBOS:
        out[(primary, profile)] = _compose(primary, profile)
    return out


def test_the_documented_profiles_exist():
    assert {"cpu", "npu_rollout", "npu_train", "npu_rollout_tail"} <= set(PROFILES)


@pytest.mark.parametrize("primary, profile", COMBOS)
def test_profile_composes_and_upstream_dataclasses_accept_it(composed, primary, profile):
    from verl.utils import omega_conf_to_dataclass
    from verl.utils.profiler import ProfilerConfig

    cfg = composed[(primary, profile)].copy()
    OmegaConf.resolve(cfg)  # as upstream's TaskRunner does before building workers (trainer/main_ppo.py)
    resolved = OmegaConf.to_container(cfg)
    gp = resolved["global_profiler"]
    assert gp["tool"] in ("torch", "npu") and gp["steps"] and Path(gp["save_path"]).is_absolute()
    assert gp["save_path"].endswith(f"/profile/{resolved['trainer']['experiment_name']}")
    for role in ("actor", "rollout"):
        node = cfg.actor_rollout_ref[role].profiler
        prof = omega_conf_to_dataclass(node, dataclass_type=ProfilerConfig)
        assert prof.tool == gp["tool"] and prof.save_path == gp["save_path"]
        omega_conf_to_dataclass(node.tool_config[gp["tool"]])  # NPUToolConfig / TorchProfilerToolConfig validate
        if prof.enable:
            assert prof.all_ranks or prof.ranks == [0]
    assert resolved["profile_check"] == {"enable": True, "strict": False}
    # Whatever is enabled will produce a trace: no reason from the config says otherwise.
    for kind in expected_traces(cfg):
        assert config_reasons(cfg, kind, gp["steps"][0]) == [], (kind, config_reasons(cfg, kind, gp["steps"][0]))


def test_profiles_select_what_they_say(composed):
    p = "dapo_qwen25_32b_npu"
    assert expected_traces(composed[(p, "cpu")]) == ["train", "rollout"]
    assert expected_traces(composed[(p, "npu_train")]) == ["train"]
    assert expected_traces(composed[(p, "npu_rollout")]) == ["rollout"]
    assert expected_traces(composed[(p, "npu_rollout_tail")]) == ["rollout"]
    assert composed[(p, "npu_rollout_tail")].actor_rollout_ref.rollout.profiler.all_ranks is True
    assert expected_traces(composed[(p, None)]) == []  # no profiling without the switch
    assert TraceCheck.from_config(composed[(p, None)]) is None
    hook = TraceCheck.from_config(composed[(p, "npu_rollout")])
    assert hook.expected == ["rollout"] and hook.steps == {2} and not hook.strict


def test_npu_rollout_applies_the_article_reductions(composed):
    base = composed[("dapo_qwen25_32b_npu", None)]
    cfg = composed[("dapo_qwen25_32b_npu", "npu_rollout")]
    assert base.data.max_response_length > 16 and base.algorithm.filter_groups.enable is True
    assert cfg.data.max_response_length == 16
    assert cfg.data.gen_batch_size == cfg.data.train_batch_size
    assert cfg.trainer.val_before_train is False
    assert cfg.algorithm.filter_groups.enable is False
    assert cfg.reward.reward_kwargs.overlong_buffer_cfg.enable is False
    assert cfg.reward.reward_kwargs.max_resp_len == 16
    # Only rollout is traced, in discrete mode (the only mode upstream's rollout server traces).
    assert cfg.actor_rollout_ref.actor.profiler.enable is False
    assert cfg.actor_rollout_ref.rollout.profiler.tool_config.npu.discrete is True


def test_train_profile_leaves_the_workload_alone(composed):
    base = OmegaConf.to_container(composed[("dapo_qwen25_32b_npu", None)], resolve=True)
    cfg = OmegaConf.to_container(composed[("dapo_qwen25_32b_npu", "npu_train")], resolve=True)
    for key in ("data", "algorithm", "reward"):
        assert cfg[key] == base[key]


def test_cpu_profile_traces_cpu_activity_only(composed):
    cfg = composed[("dapo_tiny_cpu", "cpu")]
    for role in ("actor", "rollout"):
        torch_cfg = cfg.actor_rollout_ref[role].profiler.tool_config.torch
        assert list(torch_cfg.contents) == ["cpu"] and torch_cfg.discrete is True


def test_user_overrides_win_over_the_profile():
    cfg = _compose("dapo_tiny_cpu", "npu_rollout", ["data.max_response_length=32", "global_profiler.steps=[5]",
                                                   "profile_check.strict=true"])
    assert cfg.data.max_response_length == 32 and list(cfg.global_profiler.steps) == [5]
    assert TraceCheck.from_config(cfg).strict is True


SEPARATE = ["trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1"]


def test_cpu_profile_traces_both_pools_in_separate_async():
    cfg = _compose("dapo_tiny_cpu", "cpu", SEPARATE)
    assert expected_traces(cfg) == ["train", "rollout", "rollout_pool"]
    for kind in expected_traces(cfg):
        assert config_reasons(cfg, kind, cfg.global_profiler.steps[0]) == [], kind
    hook = TraceCheck.from_config(cfg)
    assert hook.late == ["rollout", "rollout_pool"]  # checked once upstream stopped the servers (on_step_end)
    colocate = _compose("dapo_tiny_cpu", "cpu", ["trainer.v1.trainer_mode=colocate_async"])
    assert expected_traces(colocate) == ["train", "rollout"] and TraceCheck.from_config(colocate).late == []


def test_npu_rollout_profile_names_the_pools_rank_in_separate_async():
    # The 32B job's trainer pool: nnodes x n_gpus_per_node ranks; the rollout pool's first replica owns the next.
    one_device = _compose("dapo_qwen25_32b_npu", "npu_rollout", SEPARATE)
    tp = one_device.actor_rollout_ref.rollout.tensor_model_parallel_size
    assert tp > 1 and "make no rollout-pool replica" in config_reasons(one_device, "rollout_pool", 2)[0]
    pool = SEPARATE + [f"actor_rollout_ref.rollout.n_gpus_per_node={2 * tp}"]  # two replicas
    cfg = _compose("dapo_qwen25_32b_npu", "npu_rollout", pool)
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    assert expected_traces(cfg) == ["rollout", "rollout_pool"]
    (reason,) = config_reasons(cfg, "rollout_pool", 2)
    assert f"add {world} to actor_rollout_ref.rollout.profiler.ranks" in reason
    fixed = _compose("dapo_qwen25_32b_npu", "npu_rollout", pool + [f"actor_rollout_ref.rollout.profiler.ranks=[{world}]"])
    assert expected_traces(fixed) == ["rollout_pool"] and config_reasons(fixed, "rollout_pool", 2) == []
