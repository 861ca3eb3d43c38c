"""verl_ascend.checks: every rule fires on a config that has its problem and stays quiet on one that does not.

The base is the recipe's NPU config composed against upstream verl 0.9.1 (once per module); each
test changes only the keys its rule is about. The environment is always passed explicitly, so the
machine running the tests cannot leak TASK_QUEUE_ENABLE & co. into the verdict.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend import checks as doctor
from verl_ascend.checks.exits import REFUSED
from verl_ascend.checks import rules_fsdp
from verl_ascend.checks.effective import EffectiveValues
from verl_ascend.launch.commands import doctor as doctor_cli

compose = RECIPE.compose

NO_ENV: dict[str, str] = {}
# What the CLI test clears from the real environment so the machine's shell cannot decide the verdict.
SHELL_SWITCHES = (
    "TASK_QUEUE_ENABLE",
    "VLLM_ASCEND_TASK_QUEUE_ENABLE",
    "HCCL_OP_EXPANSION_MODE",
    "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
    "VLLM_USE_V1",
    "VERL_ASCEND_TARGET_VLLM",
    "VERL_ASCEND_TARGET_VLLM_ASCEND",
    "VERL_PLATFORM",
    "VERL_ASCEND_DOCTOR_STRICT",
    "VERL_ASCEND_DOCTOR_IGNORE",
)


@pytest.fixture(scope="module")
def npu():
    return compose("dapo_qwen25_32b_npu")


def variant(base, updates: dict):
    cfg = copy.deepcopy(base)
    OmegaConf.set_struct(cfg, False)
    for key, value in updates.items():
        OmegaConf.update(cfg, key, value, force_add=True, merge=False)
    return cfg


def findings(cfg, environ=NO_ENV, rule=None, severity=None):
    found = doctor.validate(cfg, environ)
    return [f for f in found if (rule is None or f.rule == rule) and (severity is None or f.severity == severity)]


def rules(cfg, environ=NO_ENV, severity=None):
    return {f.rule for f in findings(cfg, environ, severity=severity)}


# --- the shipped configs -------------------------------------------------------------------------


def test_npu_config_is_accepted_with_only_notes(npu):
    found = doctor.validate(npu, NO_ENV)
    assert [f.severity for f in found] == ["info"]
    assert found[0].rule == "context_overflow" and "skipped" in found[0].message
    assert doctor.check(npu, strict=True, environ=NO_ENV) == found


def test_tiny_cpu_config_is_accepted():
    tiny = compose("dapo_tiny_cpu")
    assert doctor.blocking(doctor.validate(tiny, NO_ENV), strict=False) == []


# --- env rules, delegated to verl.ascend.env.profile ---------------------------------------------


def test_task_queue_2_with_graph_mode(npu):
    graph = variant(npu, {"actor_rollout_ref.rollout.enforce_eager": False})
    hit = findings(graph, {"TASK_QUEUE_ENABLE": "2"}, rule="task_queue_2_with_graph_mode")
    assert len(hit) == 1 and hit[0].severity == "warn"  # article-only: warns, stating its source
    assert "source article" in hit[0].message and "enforce_eager" in hit[0].message
    # Eager mode keeps level 2; graph mode without an explicit level gets level 1 from the profile.
    assert "task_queue_2_with_graph_mode" not in rules(npu, {"TASK_QUEUE_ENABLE": "2"})
    assert "task_queue_2_with_graph_mode" not in rules(graph)


def test_aiv_with_mc2(npu):
    both = variant(npu, {"ascend.env.aiv": True, "ascend.env.mc2": True})
    assert "aiv_with_mc2" in rules(both, severity="warn")
    aiv_only = variant(npu, {"ascend.env.aiv": True, "ascend.env.mc2": False})
    assert "aiv_with_mc2" not in rules(aiv_only)
    assert "aiv_with_mc2" not in rules(npu)


def test_mc2_at_tp_1(npu):
    """vllm-ascend falls back to the plain matmul at TP 1: never a refusal."""
    # memory.check off: 32B weights at TP 1 (61 GiB) do not fit one card, a refusal of memory_exceeds_device
    tp1 = variant(npu, {"actor_rollout_ref.rollout.tensor_model_parallel_size": 1, "memory.check": False})
    assert doctor.blocking(findings(tp1), strict=False) == []
    assert "memory_exceeds_device" in rules(variant(npu, {"actor_rollout_ref.rollout.tensor_model_parallel_size": 1}))
    (note,) = findings(tp1, rule="stack_route")
    assert note.severity == "info" and "not applicable at rollout TP 1" in note.message
    assert "mc2_at_tp_1" in rules(variant(tp1, {"ascend.env.mc2": True}), severity="warn")


def test_mc2_requested_on_a_release_without_it(npu):
    declared = variant(npu, {"ascend.stack.vllm_ascend": "0.25.1rc1"})
    assert doctor.blocking(findings(declared), strict=False) == []
    (hit,) = findings(variant(declared, {"ascend.env.mc2": True}), rule="switch_unavailable")
    assert hit.severity == "error" and "#12119" in hit.message and hit.keys == ("ascend.env.mc2",)


# --- effective settings (verl_ascend/checks/effective.py, rules_effective) ------------------------------


def test_a_moved_switch_names_its_consumer(npu):
    (hit,) = findings(variant(npu, {"actor_rollout_ref.actor.grad_clip": 0.5}), rule="switch_not_reaching_consumer")
    assert hit.severity == "error" and "actor_rollout_ref.actor.optim.clip_grad (= 1.0)" in hit.message
    dead = {"actor_rollout_ref.actor.use_torch_compile": False, "actor_rollout_ref.actor.fsdp_config.use_torch_compile": True}
    (hit,) = findings(variant(npu, dead), rule="switch_not_reaching_consumer")
    assert "verl reads actor_rollout_ref.actor.fsdp_config.use_torch_compile (= True)" in hit.message
    # set to its default, or to the value its consumer holds: nothing to report
    assert "switch_not_reaching_consumer" not in rules(variant(npu, {"actor_rollout_ref.actor.grad_clip": 1.0}))
    assert "switch_not_reaching_consumer" not in rules(variant(npu, {"actor_rollout_ref.actor.use_torch_compile": False}))


def test_a_moved_switch_quotes_the_effective_value(npu):
    """The 32B config's actor SP (8) reaches fsdp_config only through __post_init__: quote 8, not the composed 1."""
    cfg = variant(npu, {"actor_rollout_ref.actor.ulysses_sequence_parallel_size": 8})
    key = "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"
    assert OmegaConf.select(cfg, key) == 1 and EffectiveValues(cfg).get(key) == 8
    # the ref is built as upstream builds it: an FSDPActorConfig whose engine config receives its SP size
    ref = variant(npu, {"actor_rollout_ref.ref.ulysses_sequence_parallel_size": 4})
    assert EffectiveValues(ref).get("actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size") == 4


def test_ref_switches_only_when_the_ref_runs(npu):
    key = "actor_rollout_ref.ref.use_torch_compile"
    assert "switch_not_reaching_consumer" not in rules(variant(npu, {key: False}))  # DAPO runs no reference policy
    with_ref = variant(npu, {key: False, "actor_rollout_ref.actor.use_kl_loss": True})
    (hit,) = findings(with_ref, rule="switch_not_reaching_consumer")
    assert "actor_rollout_ref.ref.fsdp_config.use_torch_compile (= True)" in hit.message


def test_legacy_keys_compose_and_are_named_with_their_new_home(capsys, monkeypatch):
    """Upstream's old reward keys compose as upstream composes them (with '+'); the doctor warns with each new key
    and still reports every other culprit. Without '+', the composer's error names the new key, not only Hydra's '+'."""
    from verl_ascend.run.config_utils import ConfigError, compose

    for var in SHELL_SWITCHES:
        monkeypatch.delenv(var, raising=False)
    argv = ["--config-name", "dapo_qwen25_32b_npu", "reward_model.reward_manager=dapo",
            "+reward_model.overlong_buffer.len=8", "actor_rollout_ref.actor.grad_clip=0.5"]
    assert doctor_cli(argv) == 2  # the grad_clip error; the legacy keys alone would not refuse
    out = capsys.readouterr().out
    assert "[warn] legacy_reward_keys_ignored" in out and "switch_not_reaching_consumer" in out
    assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in out
    assert doctor_cli(argv[:4]) == 0 and "OK (0 error(s)" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"their new keys: reward_model.overlong_buffer.len -> "
                                          r"reward.reward_kwargs.overlong_buffer_cfg.len"):
        compose("dapo_qwen25_32b_npu", ["reward_model.overlong_buffer.len=8"], RECIPE.config_dir)


def test_upstream_dataclass_validation_runs_in_the_driver(npu):
    (hit,) = findings(variant(npu, {"actor_rollout_ref.rollout.mode": "sync"}), rule="upstream_config_rejected")
    assert hit.severity == "error" and "Rollout mode 'sync' has been removed" in hit.message


def test_npu_torch_compile(npu):
    key = "actor_rollout_ref.actor.fsdp_config.use_torch_compile"
    (hit,) = findings(variant(npu, {key: True}), rule="npu_torch_compile")
    assert hit.severity == "error" and key in hit.keys
    assert "npu_torch_compile" not in rules(variant(npu, {key: True, "trainer.device": "cpu"}))




def test_env_profile_warning_becomes_a_warning(npu):
    aiv_tp4 = variant(
        npu,
        {"ascend.env.aiv": True, "ascend.env.mc2": False, "actor_rollout_ref.rollout.tensor_model_parallel_size": 4},
    )
    assert "aiv_not_at_tp_8" in rules(aiv_tp4, severity="warn")
    assert "aiv_not_at_tp_8" not in rules(variant(aiv_tp4, {"actor_rollout_ref.rollout.tensor_model_parallel_size": 8}))


def test_broken_env_profile_refuses_instead_of_crashing(npu, monkeypatch):
    from verl.ascend.env import profile as env_profile

    def broken(config, environ=None):
        raise RuntimeError("table unreadable")

    monkeypatch.setattr(env_profile, "evaluate_env_profile", broken)
    hit = findings(npu, rule="env_profile_failed")
    assert len(hit) == 1 and hit[0].severity == "error" and "table unreadable" in hit[0].message


def test_missing_env_profile_is_a_note_not_a_crash(npu, monkeypatch):
    import sys

    import verl.ascend.env

    assert "env_rules_unavailable" not in rules(npu)
    monkeypatch.delattr(verl.ascend.env, "profile", raising=False)
    monkeypatch.setitem(sys.modules, "verl.ascend.env.profile", None)  # importing it now raises ImportError
    hit = findings(npu, rule="env_rules_unavailable")
    assert [f.severity for f in hit] == ["info"] and "not checked" in hit[0].message


# --- reward path: overlong shaping ---------------------------------------------------------------


def test_legacy_reward_keys_are_named_with_their_new_home(npu):
    legacy = variant(
        npu,
        {"reward_model.reward_manager": "dapo", "reward_model.overlong_buffer": {"enable": True, "len": 4096}},
    )
    (hit,) = findings(legacy, rule="legacy_reward_keys_ignored")
    assert hit.severity == "warn"  # upstream runs these scripts without stopping: a refusal would be ours alone
    assert "reward_model.reward_manager -> reward.reward_manager.name" in hit.message
    assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in hit.message
    assert set(hit.keys) == {
        "reward_model.reward_manager",
        "reward_model.overlong_buffer.enable",
        "reward_model.overlong_buffer.len",
    }
    assert "legacy_reward_keys_ignored" not in rules(npu)


@pytest.mark.parametrize(
    ("updates", "needle"),
    [
        ({"reward.reward_kwargs.overlong_buffer": {"enable": True}}, "reward.reward_kwargs.{overlong_buffer}"),
        ({"reward.reward_manager.name": "naive"}, "reward.reward_manager.name='naive'"),
        ({"reward.reward_kwargs.overlong_buffer_cfg.length": 4096}, "length is never read"),
        ({"reward.reward_kwargs.overlong_buffer_cfg": {"enable": True, "len": 4096}}, "penalty_factor is missing"),
    ],
)
def test_overlong_keys_ignored(npu, updates, needle):
    hit = findings(variant(npu, updates), rule="overlong_keys_ignored", severity="error")
    assert hit and any(needle in f.message for f in hit), [f.message for f in hit]


def test_overlong_with_custom_manager_is_a_note(npu):
    custom = variant(npu, {"reward.reward_manager.source": "importlib", "reward.reward_manager.module.path": "m.py"})
    assert [f.severity for f in findings(custom, rule="overlong_keys_ignored")] == ["info"]


def test_overlong_keys_fine_when_shaping_off_or_default(npu):
    assert "overlong_keys_ignored" not in rules(npu)
    off_naive = variant(
        npu, {"reward.reward_manager.name": "naive", "reward.reward_kwargs.overlong_buffer_cfg.enable": False}
    )
    assert "overlong_keys_ignored" not in rules(off_naive)


@pytest.mark.parametrize(
    "updates",
    [
        {"reward.reward_kwargs.overlong_buffer_cfg.len": 20481},
        {"reward.reward_kwargs.overlong_buffer_cfg.len": 0},
        {"data.max_response_length": 1234},
        {"reward.reward_kwargs.max_resp_len": None},
    ],
)
def test_overlong_buffer_too_long(npu, updates):
    assert "overlong_buffer_too_long" in rules(variant(npu, updates), severity="error")


def test_overlong_buffer_as_long_as_the_budget_is_only_warned(npu):
    """Upstream asserts max_resp_len >= len, so len == max_resp_len starts (upstream's 4K DAPO script)."""
    equal = variant(npu, {"reward.reward_kwargs.overlong_buffer_cfg.len": 20480})
    assert "overlong_buffer_too_long" in rules(equal, severity="warn")
    assert "overlong_buffer_too_long" not in rules(equal, severity="error")


def test_overlong_buffer_fine(npu):
    assert "overlong_buffer_too_long" not in rules(npu)
    short = variant(npu, {"data.max_response_length": 1234, "reward.reward_kwargs.overlong_buffer_cfg.len": 256})
    assert "overlong_buffer_too_long" not in rules(short)
    off = variant(npu, {"data.max_response_length": 1234, "reward.reward_kwargs.overlong_buffer_cfg.enable": False})
    assert "overlong_buffer_too_long" not in rules(off)


def test_overlong_max_resp_len_mismatch(npu):
    mismatched = variant(npu, {"reward.reward_kwargs.max_resp_len": 16384})
    assert "overlong_max_resp_len_mismatch" in rules(mismatched, severity="warn")
    assert "overlong_max_resp_len_mismatch" not in rules(npu)  # interpolated from data.max_response_length


# --- dynamic sampling --------------------------------------------------------------------------


def test_dynamic_sampling_ignored_by_legacy_trainer(npu):
    hit = findings(variant(npu, {"trainer.use_v1": False}), rule="dynamic_sampling_ignored")
    assert [f.severity for f in hit] == ["error"]
    legacy_off = variant(npu, {"trainer.use_v1": False, "algorithm.filter_groups.enable": False})
    assert "dynamic_sampling_ignored" not in rules(legacy_off)
    assert "dynamic_sampling_ignored" not in rules(npu)


def test_dynamic_sampling_with_custom_sampler_warns(npu):
    custom = variant(
        npu, {"trainer.v1.sampler.custom_sampler.path": "my.py", "trainer.v1.sampler.custom_sampler.name": "Buf"}
    )
    assert "dynamic_sampling_ignored" in rules(custom, severity="warn")


@pytest.mark.parametrize(
    ("updates", "needle"),
    [
        ({"algorithm.filter_groups.max_num_gen_batches": 10}, "max_num_gen_batches=10"),
        ({"data.gen_batch_size": 1536}, "data.gen_batch_size=1536"),
        (
            {"algorithm.filter_groups.max_inflight_gen_batches": 2, "trainer.v1.trainer_mode": "colocate_async"},
            "colocate_async",
        ),
        (
            {"algorithm.filter_groups.max_inflight_gen_batches": 2, "algorithm.filter_groups.enable": False},
            "dynamic sampling is off",
        ),
    ],
)
def test_dynamic_sampling_knob_ignored(npu, updates, needle):
    hit = findings(variant(npu, updates), rule="dynamic_sampling_knob_ignored", severity="warn")
    assert any(needle in f.message for f in hit), [f.message for f in hit]


def test_dynamic_sampling_knobs_that_act(npu):
    acting = variant(
        npu,
        {
            "algorithm.filter_groups.max_inflight_gen_batches": 2,
            "data.gen_batch_size": 1,
            "trainer.v1.trainer_mode": "sync",
        },
    )
    assert "dynamic_sampling_knob_ignored" not in rules(acting)


def test_rollout_tail_policy_rules(npu):
    tail = "trainer.v1.dapo_ascend.rollout_tail"
    assert not {"rollout_tail_ignored", "rollout_tail_off_policy_uncorrected"} & set(rules(npu))  # off by default
    on = variant(npu, {f"{tail}.enable": True, f"{tail}.carry_over": True})
    assert "rollout_tail_off_policy_uncorrected" in rules(on, severity="warn")
    assert "rollout_tail_off_policy_uncorrected" not in rules(variant(npu, {f"{tail}.enable": True}))  # default
    corrected = variant(on, {"algorithm.rollout_correction.rollout_is": "token"})
    assert "rollout_tail_off_policy_uncorrected" not in rules(corrected)
    assert "rollout_tail_off_policy_uncorrected" not in rules(variant(on, {f"{tail}.carry_over": False}))
    assert "rollout_tail_ignored" not in rules(on)  # sync: the recipe's trainer runs the tail
    ignored = findings(variant(on, {"trainer.v1.trainer_mode": "colocate_async"}), rule="rollout_tail_ignored",
                       severity="error")
    assert ignored and "trainer.v1.trainer_mode='colocate_async'" in ignored[0].message


# --- FSDP switches -------------------------------------------------------------------------------


def test_upstream_091_fsdp2_honours_forward_prefetch():
    # Documents the installed upstream: if this turns False after a bump, the rule below starts firing.
    assert rules_fsdp.fsdp2_forward_prefetch_supported() is True


def test_forward_prefetch_noop(npu, monkeypatch):
    fsdp2 = variant(npu, {"actor_rollout_ref.actor.strategy": "fsdp2"})
    assert "forward_prefetch_noop" not in rules(fsdp2)
    monkeypatch.setattr(rules_fsdp, "fsdp2_forward_prefetch_supported", lambda: False)
    assert "forward_prefetch_noop" in rules(fsdp2, severity="warn")
    assert "forward_prefetch_noop" not in rules(npu)  # FSDP1 passes it to FullyShardedDataParallel
    off = variant(fsdp2, {"actor_rollout_ref.actor.fsdp_config.forward_prefetch": False})
    assert "forward_prefetch_noop" not in rules(off)
    megatron = variant(npu, {"actor_rollout_ref.actor.strategy": "megatron"})
    assert any("never reads fsdp_config" in f.message for f in findings(megatron, rule="forward_prefetch_noop"))


def test_fsdp_strategy_ignored(npu):
    overwritten = variant(npu, {"actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2"})
    assert "fsdp_strategy_ignored" in rules(overwritten, severity="warn")
    assert "fsdp_strategy_ignored" not in rules(npu)


# --- layout ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("updates", "needle"),
    [
        ({"actor_rollout_ref.rollout.tensor_model_parallel_size": 3}, "does not divide the 8 cards per node"),
        ({"actor_rollout_ref.rollout.tensor_model_parallel_size": 16}, "would span nodes"),
        (
            {"trainer.nnodes": 1, "actor_rollout_ref.rollout.data_parallel_size": 3},
            "does not divide the 8 cards of the job",
        ),
    ],
)
def test_rollout_tp_layout(npu, updates, needle):
    hit = findings(variant(npu, updates), rule="rollout_tp_layout", severity="error")
    assert any(needle in f.message for f in hit), [f.message for f in hit]


def test_rollout_tp_layout_fine(npu):
    assert "rollout_tp_layout" not in rules(npu)
    assert "rollout_tp_layout" not in rules(variant(npu, {"actor_rollout_ref.rollout.tensor_model_parallel_size": 4}))


@pytest.mark.parametrize(("size", "severity"), [(96, "error"), (0, "error"), (256, "warn")])
def test_fsdp_size_layout(npu, size, severity):
    sized = variant(npu, {"actor_rollout_ref.actor.fsdp_config.fsdp_size": size})
    assert "fsdp_size_layout" in rules(sized, severity=severity)


@pytest.mark.parametrize("size", [128, 64, -1])
def test_fsdp_size_layout_fine(npu, size):
    assert "fsdp_size_layout" not in rules(variant(npu, {"actor_rollout_ref.actor.fsdp_config.fsdp_size": size}))


def test_batch_not_divisible(npu):
    hit = findings(variant(npu, {"data.train_batch_size": 500}), rule="batch_not_divisible", severity="error")
    assert len(hit) == 1 and "pads the batch with 192 dummy sequences" in hit[0].message
    odd_dp = variant(npu, {"actor_rollout_ref.actor.ppo_mini_batch_size": 1, "actor_rollout_ref.rollout.n": 5})
    # every training worker asserts it (upstream's engine_workers.py): an error, not a padding warning
    assert "batch_not_divisible" in rules(odd_dp, severity="error")
    assert "batch_not_divisible" not in rules(npu)


ULYSSES = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"


@pytest.mark.parametrize("mini, n, sp, ok", [
    (4, 4, 2, True),  # 16 responses over 16/2 = 8 data-parallel ranks
    (2, 4, 2, True),  # 8 over 8 dp ranks: accepted by upstream; the old preflight (mini*n % world) refused it
    (3, 4, 2, False),  # 12 over 8 dp ranks: upstream asserts; the old doctor only warned
    (1, 4, 4, True),  # 4 over 4 dp ranks
    (1, 4, 1, False),  # 4 over 16 ranks without Ulysses
])
def test_batch_divisibility_follows_upstream_with_ulysses(npu, mini, n, sp, ok):
    """One formula: ppo_mini_batch_size x rollout.n divisible by world // ulysses (upstream's dp size)."""
    cfg = variant(npu, {"trainer.nnodes": 2, "trainer.n_gpus_per_node": 8, "data.train_batch_size": 48,
                        "actor_rollout_ref.actor.ppo_mini_batch_size": mini, "actor_rollout_ref.rollout.n": n,
                        ULYSSES: sp, "actor_rollout_ref.actor.use_dynamic_bsz": True})
    hit = findings(cfg, rule="batch_not_divisible")
    assert (not hit) == ok, [str(f) for f in hit]
    if not ok:
        assert hit[0].severity == "error" and "actor_rollout_ref.actor.ppo_mini_batch_size" in hit[0].message


def test_dynamic_bsz_token_budget(npu):
    small = variant(npu, {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 2048})
    (hit,) = findings(small, rule="dynamic_bsz_token_budget")
    assert hit.severity == "error" and ">= 2816" in hit.message
    assert "dynamic_bsz_token_budget" not in rules(npu)
    static = variant(small, {"actor_rollout_ref.actor.use_dynamic_bsz": False})
    assert "dynamic_bsz_token_budget" not in rules(static)


# --- profiling ---------------------------------------------------------------------------------

PROFILED = {
    "actor_rollout_ref.rollout.profiler.enable": True,
    "global_profiler.tool": "npu",
    "global_profiler.steps": [2],
    "actor_rollout_ref.rollout.profiler.tool_config.npu.discrete": True,
}


def test_rollout_profiling_fully_configured_is_quiet(npu):
    assert "rollout_profiler_no_output" not in rules(variant(npu, PROFILED))
    assert "rollout_profiler_no_output" not in rules(npu)  # profiling off


@pytest.mark.parametrize(
    ("updates", "severity", "needle"),
    [
        ({"global_profiler.tool": None}, "error", "no tool is set"),
        ({"global_profiler.tool": "nsys"}, "error", "supports only"),
        ({"global_profiler.save_path": None}, "error", "nowhere to write"),
        ({"global_profiler.steps": None}, "error", "no step starts the profiler"),
        ({"actor_rollout_ref.rollout.profiler.tool_config.npu.discrete": False}, "warn", "discrete mode"),
    ],
)
def test_rollout_profiler_no_output(npu, updates, severity, needle):
    hit = findings(variant(npu, {**PROFILED, **updates}), rule="rollout_profiler_no_output", severity=severity)
    assert any(needle in f.message for f in hit), [f.message for f in hit]


# --- context -----------------------------------------------------------------------------------


def _model_dir(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_context_overflow_against_local_model(npu, tmp_path):
    short = variant(npu, {"actor_rollout_ref.model.path": _model_dir(tmp_path, max_position_embeddings=16384)})
    (hit,) = findings(short, rule="context_overflow")
    assert hit.severity == "error" and "22528 tokens exceeds the model's context of 16384" in hit.message


def test_context_fits_local_model(npu, tmp_path):
    ok = variant(npu, {"actor_rollout_ref.model.path": _model_dir(tmp_path, max_position_embeddings=32768)})
    assert "context_overflow" not in rules(ok)
    scaling = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    yarn = _model_dir(tmp_path, max_position_embeddings=16384, rope_scaling=scaling)
    assert "context_overflow" not in rules(variant(npu, {"actor_rollout_ref.model.path": yarn}))


def test_context_max_model_len_and_skip_note(npu):
    capped = variant(npu, {"actor_rollout_ref.rollout.max_model_len": 8192})
    assert "context_overflow" in rules(capped, severity="error")
    assert [f.severity for f in findings(npu, rule="context_overflow")] == ["info"]


# --- schema ------------------------------------------------------------------------------------


def test_unknown_key_with_suggestion(npu):
    typo = variant(npu, {"actor_rollout_ref.actor.fsdp_config.fsdp_sise": 128})
    (hit,) = findings(typo, rule="unknown_key")
    assert hit.severity == "warn" and hit.keys == ("actor_rollout_ref.actor.fsdp_config.fsdp_sise",)
    assert "Did you mean actor_rollout_ref.actor.fsdp_config.fsdp_size" in hit.message


def test_a_field_of_the_sections_dataclass_is_a_key_though_the_yaml_omits_it(npu):
    # RolloutConfig.enable_sleep_mode (read by upstream's vLLM server) is absent from the generated YAML.
    from verl_ascend.checks.rules_schema import upstream_reference

    assert "enable_sleep_mode" not in upstream_reference("fsdp")["actor_rollout_ref"]["rollout"]
    fine = variant(npu, {"actor_rollout_ref.rollout.enable_sleep_mode": False})
    assert "unknown_key" not in rules(fine)
    typo = variant(npu, {"actor_rollout_ref.rollout.enable_sleep_mod": False})
    (hit,) = findings(typo, rule="unknown_key")
    assert hit.keys == ("actor_rollout_ref.rollout.enable_sleep_mod",)


def test_free_form_and_own_sections_are_not_unknown(npu):
    fine = variant(
        npu,
        {
            "actor_rollout_ref.model.override_config.attention_dropout": 0.0,
            "ray_kwargs.ray_init.num_gpus": 8,
            "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space": 4,
            "reward.custom_reward_function.reward_kwargs.scale": 2,
            "trainer.v1.dapo_ascend": {"parameter_sync_step": 1},
            "reward.timeout": 30,
            "tiny_dir": "/tmp/x",
        },
    )
    assert "unknown_key" not in rules(fine)


# --- API: check, strict, ignore, CLI -------------------------------------------------------------


def test_check_raises_with_every_error_in_the_message(npu):
    bad = variant(npu, {"trainer.use_v1": False, "actor_rollout_ref.actor.fsdp_config.fsdp_size": 96})
    with pytest.raises(doctor.DoctorError) as err:
        doctor.check(bad, environ=NO_ENV)
    assert set(err.value.rules) == {"dynamic_sampling_ignored", "fsdp_size_layout"}
    assert "dynamic_sampling_ignored" in str(err.value) and "fsdp_size_layout" in str(err.value)


def test_strict_turns_warnings_into_refusals(npu):
    warned = variant(npu, {"algorithm.filter_groups.max_num_gen_batches": 10})
    warnings = [f.rule for f in doctor.check(warned, environ=NO_ENV) if f.severity == "warn"]
    assert warnings == ["dynamic_sampling_knob_ignored"]
    with pytest.raises(doctor.DoctorError, match="strict"):
        doctor.check(warned, strict=True, environ=NO_ENV)
    with pytest.raises(doctor.DoctorError):
        doctor.check(warned, environ={"VERL_ASCEND_DOCTOR_STRICT": "1"})


def test_ignore_downgrades_a_rule_to_a_note(npu):
    bad = variant(npu, {"actor_rollout_ref.actor.fsdp_config.fsdp_size": 96})
    found = doctor.check(bad, environ={"VERL_ASCEND_DOCTOR_IGNORE": "fsdp_size_layout"})
    (note,) = [f for f in found if f.rule == "fsdp_size_layout"]
    assert note.severity == "info" and note.message.startswith("(ignored via VERL_ASCEND_DOCTOR_IGNORE)")


def test_cli_exit_codes(capsys, monkeypatch):
    for var in SHELL_SWITCHES:
        monkeypatch.delenv(var, raising=False)
    assert doctor_cli([]) == 0
    assert "doctor verdict: OK" in capsys.readouterr().out
    assert doctor_cli(["trainer.use_v1=False"]) == REFUSED == 2  # one table: verl_ascend.checks.exits
    assert "[error] dynamic_sampling_ignored" in capsys.readouterr().out
    assert doctor_cli(["data.max_respons_length=1"]) == REFUSED
    assert "data.max_respons_length" in capsys.readouterr().err


def test_the_backend_and_the_recipe_register_their_own_rules():
    """The neutral checks hold no Ascend or recipe rule; each owner registers its own (entry points)."""
    from recipe.dapo_ascend.checks import rollout_tail_policy, trainer_mode_supported
    from verl.ascend.env.rules import env_conflicts
    rules = doctor.rules()
    assert env_conflicts in rules and rollout_tail_policy in rules and trainer_mode_supported in rules
    assert not [r for r in doctor.BUILTIN_RULES if r.__module__.startswith(("verl.ascend", "recipe"))]
    doctor.register(env_conflicts)  # idempotent
    assert doctor.rules().count(env_conflicts) == 1


# -- data.gen_batch_size as upstream's V1 trainer treats it at step 1 (trainer_base.py) ---------------------------
NO_FILTER = {"algorithm.filter_groups.enable": False}


def test_gen_batch_size_kept_and_not_dividing_is_upstreams_value_error(npu):
    hit = findings(variant(npu, {**NO_FILTER, "data.gen_batch_size": 48}), rule="gen_batch_size_not_dividing")
    assert [f.severity for f in hit] == ["error"]
    assert "'num_prompts (512) must be a positive multiple of gen_batch_size (48)'" in hit[0].message
    assert "trainer_base.py::PPOTrainer._next_train_batch" in hit[0].message


@pytest.mark.parametrize("updates", [
    {**NO_FILTER, "data.gen_batch_size": 256},  # kept and a divisor of 512: two fetches a step
    {**NO_FILTER, "data.gen_batch_size": 48, "trainer.v1.trainer_mode": "colocate_async"},  # forced to 1
    {"data.gen_batch_size": 48},  # dynamic sampling: forced to 1 (dynamic_sampling_knobs says so)
    {**NO_FILTER, "data.gen_batch_size": 48, "trainer.v1.sampler.sync_refill_failed_groups": True},  # forced to 1
])
def test_gen_batch_size_that_upstream_accepts_or_overrides_is_not_an_error(npu, updates):
    assert "gen_batch_size_not_dividing" not in rules(variant(npu, updates))


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_gen_batch_size_in_an_async_mode_is_a_warning_naming_upstreams_override(npu, mode):
    hit = findings(variant(npu, {"data.gen_batch_size": 1536, "trainer.v1.trainer_mode": mode}),
                   rule="gen_batch_size_overridden", severity="warn")
    assert len(hit) == 1 and "'data.gen_batch_size=1536 is overridden to 1.'" in hit[0].message
    assert f"trainer.v1.trainer_mode='{mode}'" in hit[0].message
    assert "gen_batch_size_overridden" not in rules(variant(npu, {"trainer.v1.trainer_mode": mode}))  # unset


# -- separate_async's two pools on the recipe's own 128-card preset -------------------------------------------------
def _separate(updates=None):
    return RECIPE.compose("dapo_qwen25_32b_npu", ["+pools=npu_separate_128", *(updates or [])])


def test_separate_async_nodes_said_as_a_total_and_refused_above_the_cluster():
    ok = findings(_separate(), environ={"VERL_ASCEND_CLUSTER_NNODES": "16"}, rule="separate_async_nodes")
    assert [f.severity for f in ok] == ["info"] and "trainer.nnodes=4 + actor_rollout_ref.rollout.nnodes=12" in ok[0].message
    stacked = _separate(["trainer.nnodes=8"])  # a script's own trainer.nnodes: 8 + the preset's 12
    refused = findings(stacked, environ={"VERL_ASCEND_CLUSTER_NNODES": "16"}, rule="separate_async_nodes")
    assert [f.severity for f in refused] == ["error"]
    assert "= 20 nodes, but VERL_ASCEND_CLUSTER_NNODES=16" in refused[0].message
    assert "the preset +pools=npu_separate_128" in refused[0].message and "trainer.nnodes <= 4" in refused[0].accepted
    assert [f.severity for f in findings(stacked, rule="separate_async_nodes")] == ["info"]  # no cluster declared


def test_separate_async_batch_refusal_names_the_presets_sync_step():
    msg = findings(_separate(["data.train_batch_size=128"]), rule="separate_async_batch")[0].message
    assert "parameter_sync_step=16 is the value of the preset +pools=npu_separate_128" in msg
    assert "upstream's default is 4" in msg
    own = findings(_separate(["data.train_batch_size=128", "trainer.v1.separate_async.parameter_sync_step=8"]),
                   rule="separate_async_batch")[0].message
    assert "preset" not in own  # 8 is the user's own value
