"""Each rule of the env profile (verl/ascend/env/profile.yaml), on the recipe's composed config."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from omegaconf import OmegaConf, open_dict

from recipe.dapo_ascend.main_dapo import RECIPE
from verl.ascend.env.profile import (
    PROFILE_ENV,
    EnvConflictError,
    apply_to_config,
    evaluate_env_profile,
    find_conflicts,
    resolve_env_profile,
)
from verl.ascend.env.wire import rollout_env_from_environ

compose_config = RECIPE.compose

EAGER = "actor_rollout_ref.rollout.enforce_eager"
VLLM_EAGER = "actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager"  # the spelling vLLM obeys first
TP = "actor_rollout_ref.rollout.tensor_model_parallel_size"
ENGINE = "actor_rollout_ref.rollout.name"


@pytest.fixture(scope="module")
def base_config():
    return compose_config("dapo_base", [])


@pytest.fixture
def make(base_config):
    """A copy of the recipe config with dotted-key overrides (``ascend.*`` keys may be new)."""

    def _make(**overrides):
        cfg = copy.deepcopy(base_config)
        with open_dict(cfg):
            for key, value in overrides.items():
                OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
        return cfg

    return _make


def rules(errors):
    return sorted(e.rule for e in errors)


# --------------------------------------------------------------------------- task queue


def test_task_queue_2_in_eager_mode(make):
    profile = resolve_env_profile(make(**{EAGER: True}), environ={})
    assert profile.effective("train")["TASK_QUEUE_ENABLE"] == "2"
    assert profile.effective("rollout")["TASK_QUEUE_ENABLE"] == "2"
    assert "eager" in profile.reason("TASK_QUEUE_ENABLE")


def test_task_queue_1_with_graph_mode(make):
    profile = resolve_env_profile(make(**{EAGER: False}), environ={})
    assert profile.effective("rollout")["TASK_QUEUE_ENABLE"] == "1"
    assert "graph" in profile.reason("TASK_QUEUE_ENABLE", "rollout")


def warning_ids(profile):
    return sorted(w.split("]")[0].lstrip("[") for w in profile.warnings)


def test_exported_task_queue_2_with_graph_mode_is_a_sourced_warning(make):
    """Article-only rule (no torch_npu/vllm-ascend document): a warning that says so, not a refusal."""
    profile = resolve_env_profile(make(**{EAGER: False}), environ={"TASK_QUEUE_ENABLE": "2"})
    assert profile.effective("rollout")["TASK_QUEUE_ENABLE"] == "2"
    (warning,) = [w for w in profile.warnings if "task_queue_2_with_graph_mode" in w]
    assert "source article" in warning and "unverified" in warning and EAGER in warning


def test_exported_task_queue_wins_when_no_conflict(make):
    profile = resolve_env_profile(make(**{EAGER: True}), environ={"TASK_QUEUE_ENABLE": "0"})
    assert profile.effective("rollout")["TASK_QUEUE_ENABLE"] == "0"
    assert profile.settings["train"]["TASK_QUEUE_ENABLE"].source == "environ"


def test_rollout_only_task_queue_resolves_the_conflict(make):
    env = {"TASK_QUEUE_ENABLE": "2", "VLLM_ASCEND_TASK_QUEUE_ENABLE": "1"}
    profile = resolve_env_profile(make(**{EAGER: False}), environ=env)
    assert profile.env("train")["TASK_QUEUE_ENABLE"] == "2"
    assert profile.rollout_env_vars()["TASK_QUEUE_ENABLE"] == "1"
    assert "VLLM_ASCEND_TASK_QUEUE_ENABLE" in profile.reason("TASK_QUEUE_ENABLE", "rollout")


def test_rollout_only_task_queue_2_with_graph_mode_warns(make):
    profile, errors = evaluate_env_profile(make(**{EAGER: False}), environ={"VLLM_ASCEND_TASK_QUEUE_ENABLE": "2"})
    assert errors == [] and "task_queue_2_with_graph_mode" in warning_ids(profile)


def test_launch_blocking_warns_that_task_queue_is_off(make):
    profile = resolve_env_profile(make(), environ={"ASCEND_LAUNCH_BLOCKING": "1"})
    assert any("launch_blocking_disables_task_queue" in w for w in profile.warnings)


# --------------------------------------------------------------------------- mc2 and AIV


def test_mc2_on_by_default_only_for_vllm_at_tp_8_as_additional_config(make):
    on = resolve_env_profile(make(**{ENGINE: "vllm", TP: 8}), environ={})
    assert on.additional_config_values() == {"enable_matmul_allreduce": True}
    assert "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE" not in on.effective("rollout")  # the deprecated route is gone
    for kw in ({ENGINE: "vllm", TP: 4}, {ENGINE: "sglang", TP: 8}):
        assert resolve_env_profile(make(**kw), environ={}).additional_config == {}


def test_mc2_at_tp_1_is_a_warning_and_auto_is_not_applicable(make):
    profile, errors = evaluate_env_profile(make(**{ENGINE: "vllm", TP: 1, "ascend.env.mc2": True}), environ={})
    assert errors == [] and "mc2_at_tp_1" in warning_ids(profile)
    auto = resolve_env_profile(make(**{ENGINE: "vllm", TP: 1}), environ={})
    assert auto.additional_config == {} and any("not applicable at rollout TP 1" in n for n in auto.notes)


def test_aiv_at_tp_8_only_without_mc2_and_only_for_rollout(make):
    with_mc2 = resolve_env_profile(make(**{ENGINE: "vllm", TP: 8}), environ={})
    assert "HCCL_OP_EXPANSION_MODE" not in with_mc2.effective("rollout")
    no_mc2 = resolve_env_profile(make(**{ENGINE: "vllm", TP: 8, "ascend.env.mc2": False}), environ={})
    assert no_mc2.rollout_env_vars()["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert "HCCL_OP_EXPANSION_MODE" not in no_mc2.env("train")
    tp4 = resolve_env_profile(make(**{ENGINE: "vllm", TP: 4, "ascend.env.mc2": False}), environ={})
    assert "HCCL_OP_EXPANSION_MODE" not in tp4.effective("rollout")


def test_aiv_with_mc2_is_a_sourced_warning(make):
    profile, errors = evaluate_env_profile(make(**{ENGINE: "vllm", TP: 8, "ascend.env.aiv": True}), environ={})
    assert errors == [] and "aiv_with_mc2" in warning_ids(profile)
    (warning,) = [w for w in profile.warnings if "aiv_with_mc2" in w]
    assert "#3881" in warning and "unverified" in warning


def test_exported_aiv_is_global_and_says_so(make):
    profile, errors = evaluate_env_profile(make(**{ENGINE: "vllm", TP: 8}), environ={"HCCL_OP_EXPANSION_MODE": "AIV"})
    assert errors == [] and "aiv_with_mc2" in warning_ids(profile)
    profile = resolve_env_profile(make(**{ENGINE: "vllm", TP: 4}), environ={"HCCL_OP_EXPANSION_MODE": "AIV"})
    assert profile.env("train")["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert {w.split("]")[0] for w in profile.warnings} >= {"[aiv_reaches_training", "[aiv_not_at_tp_8"}


def test_config_override_keeps_a_rollout_variable_rollout_only(make):
    cfg = make(**{ENGINE: "vllm", TP: 4, "ascend.env.overrides": {"HCCL_OP_EXPANSION_MODE": "AIV"}})
    profile = resolve_env_profile(cfg, environ={})
    assert profile.rollout_env_vars()["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert "HCCL_OP_EXPANSION_MODE" not in profile.env("train")
    assert not any("aiv_reaches_training" in w for w in profile.warnings)


# --------------------------------------------------------------------------- V1, affinity, platform, fused ops


def test_vllm_v1_is_gone_and_chunked_prefill_needs_no_variable(make):
    profile, errors = evaluate_env_profile(
        make(**{ENGINE: "vllm", "actor_rollout_ref.rollout.enable_chunked_prefill": True}), environ={}
    )
    assert errors == [] and "VLLM_USE_V1" not in profile.effective("rollout")
    errors = find_conflicts(make(**{"ascend.env.vllm_v1": True}), environ={})
    assert rules(errors) == ["invalid_value"] and "does not exist in vLLM 0.23" in str(errors[0])


def test_vllm_variable_unknown_to_the_target_release(make):
    """Config-set: an error naming it; shell-set: a warning (vLLM itself only logs it)."""
    npu = {"trainer.device": "npu"}
    cfg = make(**npu, **{"ray_kwargs.ray_init.runtime_env.env_vars": {"VLLM_USE_V1": "1"}})
    (error,) = find_conflicts(cfg, environ={})
    assert error.rule == "switch_unavailable" and "VLLM_USE_V1" in error.keys and "vllm 0.23.0" in str(error)
    profile, errors = evaluate_env_profile(make(**npu), environ={"VLLM_ASCEND_ENABLE_PREFETCH_MLP": "1"})
    assert errors == [] and "env_var_not_read" in warning_ids(profile)
    assert evaluate_env_profile(make(), environ={"VLLM_ASCEND_ENABLE_PREFETCH_MLP": "1"})[0].warnings == []  # not NPU


def test_deprecated_vllm_ascend_variable_names_its_additional_config_key(make):
    profile, errors = evaluate_env_profile(make(**{"trainer.device": "npu"}), environ={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"})
    (warning,) = [w for w in profile.warnings if "env_var_deprecated" in w]
    assert errors == [] and "additional_config.enable_flashcomm1" in warning


def test_cpu_affinity_differs_per_role_on_an_arm_host(make):
    profile = resolve_env_profile(make(**{"ascend.env.host_cpu": "aarch64"}), environ={})
    assert profile.env("train")["CPU_AFFINITY_CONF"] == "1"
    assert profile.rollout_env_vars()["CPU_AFFINITY_CONF"] == "0"
    assert profile.reason("CPU_AFFINITY_CONF", "train") != profile.reason("CPU_AFFINITY_CONF", "rollout")


# --------------------------------------------------------------------------- rollout CPU binding by host CPU

BIND = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.enable_cpu_binding"


@pytest.mark.parametrize(
    ("host", "rollout", "evidence"),
    [("aarch64", "0", "worker/worker.py:779-781"), ("x86_64", "1", "vllm_ascend/cpu_binding.py:801-804")],
)
def test_rollout_binding_follows_the_declared_host_cpu_where_the_server_gets_it(make, monkeypatch, host, rollout, evidence):
    """The value the rollout server actor is created with (the platform's rollout_env_vars), per host CPU."""
    from verl.plugin.platform import get_platform

    monkeypatch.delenv(PROFILE_ENV, raising=False)
    cfg = make(**{ENGINE: "vllm", "ascend.env.host_cpu": host})
    profile = apply_to_config(cfg, environ={})
    assert get_platform().rollout_env_vars()["CPU_AFFINITY_CONF"] == rollout
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars["CPU_AFFINITY_CONF"] == "1"  # training binds either way
    reason = profile.reason("CPU_AFFINITY_CONF", "rollout")
    assert evidence in reason and f"host CPU {host} (declared: ascend.env.host_cpu={host})" in reason
    assert json.loads(cfg.ray_kwargs.ray_init.runtime_env.env_vars[PROFILE_ENV])["host_cpu"] == host


@pytest.mark.parametrize(("machine", "rollout"), [("aarch64", "0"), ("arm64", "0"), ("x86_64", "1"), ("AMD64", "1")])
def test_auto_reads_the_cpu_of_the_resolving_process(make, monkeypatch, machine, rollout):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: machine)
    profile = resolve_env_profile(make(**{ENGINE: "vllm"}), environ={})
    assert profile.rollout_env_vars()["CPU_AFFINITY_CONF"] == rollout
    assert f"host CPU {machine.lower()} (ascend.env.host_cpu=auto: platform.machine()" in profile.reason(
        "CPU_AFFINITY_CONF", "rollout"
    )


def test_arm_host_with_vllm_ascend_binding_off_binds_through_torch_npu(make):
    profile = resolve_env_profile(make(**{ENGINE: "vllm", "ascend.env.host_cpu": "aarch64", BIND: False}), environ={})
    assert profile.rollout_env_vars()["CPU_AFFINITY_CONF"] == "1"
    assert "enable_cpu_binding=false" in profile.reason("CPU_AFFINITY_CONF", "rollout")


def test_non_vllm_rollout_binds_through_torch_npu_on_any_host(make):
    profile = resolve_env_profile(make(**{ENGINE: "sglang", "ascend.env.host_cpu": "aarch64"}), environ={})
    assert profile.rollout_env_vars()["CPU_AFFINITY_CONF"] == "1"


def test_unknown_host_cpu_is_refused_naming_the_key(make):
    _profile, errors = evaluate_env_profile(make(**{"ascend.env.host_cpu": "riscv64"}), environ={})
    (error,) = errors
    assert error.rule == "invalid_value" and error.keys == ("ascend.env.host_cpu",)
    assert "'riscv64'" in str(error) and "auto, aarch64, x86_64" in str(error)


@pytest.mark.parametrize(("host", "warned"), [("x86_64", True), ("aarch64", False)])
def test_explicit_unbound_rollout_is_warned_where_nobody_binds(make, host, warned):
    cfg = make(**{ENGINE: "vllm", "ascend.env.host_cpu": host})
    profile, errors = evaluate_env_profile(cfg, environ={"CPU_AFFINITY_CONF": "0"})
    assert errors == [] and profile.rollout_env_vars()["CPU_AFFINITY_CONF"] == "0"
    assert any(w.startswith("[rollout_cpus_unbound]") for w in profile.warnings) is warned


def test_device_npu_pins_the_platform(make):
    profile = resolve_env_profile(make(**{"trainer.device": "npu"}), environ={})
    assert profile.env("train")["VERL_PLATFORM"] == "huawei"
    assert "VERL_PLATFORM" not in resolve_env_profile(make(**{"trainer.device": "cpu"}), environ={}).env("train")
    errors = find_conflicts(make(**{"trainer.device": "npu"}), environ={"VERL_PLATFORM": "cpu"})
    assert rules(errors) == ["device_npu_platform_mismatch"]


def test_fused_op_switches_become_env_vars(make):
    profile = resolve_env_profile(make(**{"ascend.fused_ops.swiglu": False}), environ={})
    env = profile.env("train")
    assert env["VERL_ASCEND_FUSED_SWIGLU"] == "0" and env["VERL_ASCEND_FUSED_RMS_NORM"] == "1"
    master_off = resolve_env_profile(make(**{"ascend.fused_ops.enable": False}), environ={}).env("train")
    assert master_off["VERL_ASCEND_FUSED_OPS"] == "0" and master_off["VERL_ASCEND_FUSED_ROTARY_MUL"] == "0"


def test_a_fused_op_switch_is_declared_in_the_ascend_home_only():
    """docs/architecture.md "Add a fused-op switch": its switch field, its variable, its default and its
    profile row are all files of verl/ascend, they agree, and no other home names the variable."""
    from pathlib import Path

    import yaml

    from verl.ascend import envs as ascend_envs
    from verl.ascend.env.profile import DEFAULTS_PATH
    from verl.ascend.env.table import TABLE_PATH
    from verl.ascend.ops.switches import ENV_VARS, FusedOpSwitches
    from verl_ascend import envs

    switches = [f.name for f in dataclasses.fields(FusedOpSwitches)]
    assert switches == list(ascend_envs.FUSED_OPS) == list(ENV_VARS)
    assert list(yaml.safe_load(DEFAULTS_PATH.read_text())["ascend"]["fused_ops"]) == switches
    rows = {row["name"]: [c.get("value_from") for c in row.get("choose", [])]
            for row in yaml.safe_load(TABLE_PATH.read_text())["variables"]}
    for switch, var in ascend_envs.FUSED_OPS.items():
        assert rows[var.name] == [f"knob.fused_ops.{switch}"], var.name
        assert envs.declared()[var.name] is var  # assembled through the entry point, not written twice
    repo = Path(__file__).resolve().parents[2]
    elsewhere = [str(path.relative_to(repo)) for home in ("verl_ascend", "verl/cpu", "recipe/dapo_ascend")
                 for path in sorted((repo / home).rglob("*")) if path.suffix in (".py", ".yaml")
                 and "VERL_ASCEND_FUSED_" in path.read_text(encoding="utf-8")]
    assert elsewhere == [], "a fused-op switch belongs to verl/ascend only"


def test_emulator_flag_is_forwarded_only_when_set(make):
    assert (
        resolve_env_profile(make(), environ={"VERL_ASCEND_NPU_EMULATOR": "1"}).env("train")["VERL_ASCEND_NPU_EMULATOR"]
        == "1"
    )
    assert "VERL_ASCEND_NPU_EMULATOR" not in resolve_env_profile(make(), environ={}).env("train")


# --------------------------------------------------------------------------- precedence and bad values


def test_precedence_override_then_ray_kwargs_then_environ(make):
    key = "ray_kwargs.ray_init.runtime_env.env_vars"
    cfg = make(**{EAGER: True, key: {"TASK_QUEUE_ENABLE": "1"}})
    assert resolve_env_profile(cfg, environ={"TASK_QUEUE_ENABLE": "0"}).env("train")["TASK_QUEUE_ENABLE"] == "1"
    cfg = make(**{EAGER: True, key: {"TASK_QUEUE_ENABLE": "1"}, "ascend.env.overrides": {"TASK_QUEUE_ENABLE": 2}})
    profile = resolve_env_profile(cfg, environ={"TASK_QUEUE_ENABLE": "0"})
    assert profile.env("train")["TASK_QUEUE_ENABLE"] == "2"
    assert "ascend.env.overrides.TASK_QUEUE_ENABLE" in profile.reason("TASK_QUEUE_ENABLE")


@pytest.mark.parametrize(
    "overrides,environ,keys",
    [
        ({}, {"TASK_QUEUE_ENABLE": "3"}, ("TASK_QUEUE_ENABLE", "environment")),
        ({}, {"CPU_AFFINITY_CONF": "fast"}, ("CPU_AFFINITY_CONF", "environment")),
        ({}, {"HCCL_OP_EXPANSION_MODE": "GPU"}, ("HCCL_OP_EXPANSION_MODE", "environment")),
        ({}, {"VERL_ASCEND_FUSED_SWIGLU": "perhaps"}, ("VERL_ASCEND_FUSED_SWIGLU", "environment")),
        (
            {"ascend.env.overrides": {"TASK_QUEUE_ENABLE": 5}},
            {},
            ("TASK_QUEUE_ENABLE", "ascend.env.overrides.TASK_QUEUE_ENABLE"),
        ),
        ({"ascend.env.mc2": "maybe"}, {}, ("ascend.env.mc2",)),
        ({"ascend.env.turbo": True}, {}, ("ascend.env.turbo",)),
        ({"ascend.fused_ops.flash": True}, {}, ("ascend.fused_ops",)),
        ({"ascend.colour": "red"}, {}, ("ascend.colour",)),
        ({}, {"CPU_AFFINITY_CONF": "2,npu_affine:3"}, ("CPU_AFFINITY_CONF", "environment")),
        ({}, {"HCCL_CONNECT_TIMEOUT": "60"}, ("HCCL_CONNECT_TIMEOUT", "environment")),
        ({}, {"HCCL_CONNECT_TIMEOUT": "7201"}, ("HCCL_CONNECT_TIMEOUT", "environment")),
        ({"ascend.stack.vllm_ascend": "latest"}, {}, ("ascend.stack.vllm_ascend",)),
    ],
)
def test_bad_values_name_the_key_and_what_is_accepted(make, overrides, environ, keys):
    errors = find_conflicts(make(**overrides), environ=environ)
    assert [e.rule for e in errors] == ["invalid_value"]
    assert errors[0].keys == keys
    assert "accepted" in str(errors[0]) or "must match" in str(errors[0])


@pytest.mark.parametrize("value", ["2,npu_affine:1", "mode:1,npu0:0-15,npu_affine:0", "0"])
def test_cpu_affinity_accepts_the_documented_forms(make, value):
    assert resolve_env_profile(make(), environ={"CPU_AFFINITY_CONF": value}).env("train")["CPU_AFFINITY_CONF"] == value


@pytest.mark.parametrize("value,ok", [("120", True), ("7200", True), ("119", False), ("7201", False)])
def test_hccl_connect_timeout_range(make, value, ok):
    assert (find_conflicts(make(), environ={"HCCL_CONNECT_TIMEOUT": value}) == []) is ok


def test_all_conflicts_are_reported_and_the_first_is_raised(make):
    cfg = make(**{"trainer.device": "npu", "ascend.env.mc2": "maybe"})
    environ = {"VERL_PLATFORM": "cuda", "TASK_QUEUE_ENABLE": "9"}
    errors = find_conflicts(cfg, environ=environ)
    assert rules(errors) == ["device_npu_platform_mismatch", "invalid_value", "invalid_value"]
    with pytest.raises(EnvConflictError):
        resolve_env_profile(cfg, environ=environ)


def test_unknown_override_is_passed_through(make):
    profile = resolve_env_profile(make(**{"ascend.env.overrides": {"MY_VAR": "x y"}}), environ={})
    assert profile.env("train")["MY_VAR"] == "x y" and profile.rollout_env_vars()["MY_VAR"] == "x y"
    assert any(line.startswith("MY_VAR='x y'") for line in profile.lines())


# --------------------------------------------------------------------------- delivery


def test_apply_to_config_fills_the_ray_runtime_env(make, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    cfg = make(
        **{
            EAGER: True,
            ENGINE: "vllm",
            TP: 8,
            "ray_kwargs.ray_init.runtime_env.env_vars": {"HCCL_CONNECT_TIMEOUT": "600"},
        }
    )
    profile = apply_to_config(cfg, environ={})
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars["TASK_QUEUE_ENABLE"] == "2" and env_vars["HCCL_CONNECT_TIMEOUT"] == "600"  # user's kept
    data = json.loads(env_vars[PROFILE_ENV])
    assert data["rollout"] == profile.rollout_env_vars() and "HCCL_CONNECT_TIMEOUT" not in data["applied"]
    assert rollout_env_from_environ()["TASK_QUEUE_ENABLE"] == "2"
    # mc2 goes where verl forwards it to vLLM's engine arguments, not into any environment
    assert OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config) == {
        "enable_matmul_allreduce": True
    }
    # idempotent, and a changed config re-resolves the keys it wrote itself
    OmegaConf.update(cfg, EAGER, False)
    apply_to_config(cfg, environ={})
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.TASK_QUEUE_ENABLE == "1"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.HCCL_CONNECT_TIMEOUT == "600"


def test_apply_to_config_works_on_a_struct_config_without_env_vars(make, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    cfg = make()
    OmegaConf.set_struct(cfg, True)
    apply_to_config(cfg, environ={})
    assert PROFILE_ENV in cfg.ray_kwargs.ray_init.runtime_env.env_vars


def test_apply_to_config_keeps_the_users_additional_config(make, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    key = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config"
    cfg = make(**{ENGINE: "vllm", TP: 8, key: {"enable_matmul_allreduce": False, "enable_cpu_binding": True}})
    profile = apply_to_config(cfg, environ={})
    assert OmegaConf.to_container(OmegaConf.select(cfg, key)) == {
        "enable_matmul_allreduce": False, "enable_cpu_binding": True
    }
    assert profile.additional_config["enable_matmul_allreduce"].source == "engine_kwargs"
    assert "HCCL_OP_EXPANSION_MODE" in profile.rollout_env_vars()  # mc2 off by the user's key -> AIV


def test_apply_to_config_refuses_a_conflict(make, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    cfg = make(**{"trainer.device": "npu"})
    with pytest.raises(EnvConflictError, match="device_npu_platform_mismatch"):
        apply_to_config(cfg, environ={"VERL_PLATFORM": "cuda"})
    assert (
        "env_vars" not in cfg.ray_kwargs.ray_init.runtime_env
        or PROFILE_ENV not in cfg.ray_kwargs.ray_init.runtime_env.env_vars
    )


def test_platform_serves_the_rollout_role(make, monkeypatch):
    from verl.plugin.platform import get_platform

    monkeypatch.delenv(PROFILE_ENV, raising=False)
    apply_to_config(make(**{ENGINE: "vllm", TP: 8, "ascend.env.mc2": False, "ascend.env.host_cpu": "aarch64"}), environ={})
    env = get_platform().rollout_env_vars()
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV" and env["CPU_AFFINITY_CONF"] == "0"
    assert env["NCCL_CUMEM_ENABLE"] == "0"  # upstream PlatformNPU's own variables are kept


def test_malformed_profile_env_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, "{not json")
    with pytest.raises(ValueError, match=PROFILE_ENV):
        rollout_env_from_environ()


# --------------------------------------------------------------------------- evaluated once per config state


# (fixture `evaluations`: tests/npu/conftest.py)


def test_a_dry_run_evaluates_the_profile_once(evaluations):
    """Three sections of DRY_RUN=1 read the profile (effective settings, env lines, the checks' rule): one evaluation."""
    import io

    from verl_ascend.launch import commands

    config = compose_config("dapo_qwen25_32b_npu", [])
    out = io.StringIO()
    assert commands.dry_run(config, environ={}, out=out) == 0
    text = out.getvalue()
    assert "TASK_QUEUE_ENABLE=2" in text and "# --- target stack" in text  # every section still had its profile
    assert len(evaluations) == 1


def test_evaluated_once_is_keyed_by_the_config_state_and_keeps_nothing_after(make, evaluations):
    from verl.ascend.env.profile import evaluated_once

    config = make(**{EAGER: True})
    with evaluated_once():
        first = resolve_env_profile(config, environ={})
        assert resolve_env_profile(config, environ={}).env("train") == first.env("train")
        assert len(evaluations) == 1
        first.settings["train"].clear()  # a caller changing its answer does not change the next one
        assert resolve_env_profile(config, environ={}).env("train")["TASK_QUEUE_ENABLE"] == "2"
        config.actor_rollout_ref.rollout.enforce_eager = False  # a changed config is evaluated again
        assert resolve_env_profile(config, environ={}).env("train")["TASK_QUEUE_ENABLE"] == "1"
        assert resolve_env_profile(config, environ={"TASK_QUEUE_ENABLE": "0"}).env("train")["TASK_QUEUE_ENABLE"] == "0"
        assert len(evaluations) == 3
    resolve_env_profile(config, environ={})
    assert len(evaluations) == 4  # outside the block nothing is kept


def test_the_memo_key_covers_every_key_the_evaluation_reads():
    """READS is the memo's key: every config key the evaluating modules select must lie under one of them."""
    import ast
    from pathlib import Path

    from verl.ascend.env import profile as env_profile
    from verl.ascend.env import stack, table

    constants = {"ADDITIONAL_CONFIG_KEY": table.ADDITIONAL_CONFIG_KEY, "RAY_ENV_KEY": table.RAY_ENV_KEY}
    read = set()
    for name in ("profile", "vllm_switches", "stack"):
        tree = ast.parse((Path(env_profile.__file__).parent / f"{name}.py").read_text())
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name != "apply_to_config"):
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call) and len(n.args) >= 2):
                if ast.unparse(call.func) not in ("select", "OmegaConf.select"):
                    continue
                arg = call.args[1]
                if isinstance(arg, ast.Constant):
                    read.add(arg.value)
                elif isinstance(arg, ast.Name) and arg.id in constants:
                    read.add(constants[arg.id])
    read.add(stack.CONFIG_KEY.format("x"))  # select(config, key) with key = CONFIG_KEY.format(...)
    assert len(read) >= 8, read  # the scan sees the reads
    uncovered = sorted(k for k in read if not any(k == r or k.startswith(r + ".") for r in env_profile.READS))
    assert uncovered == []


@pytest.mark.parametrize("engine, overrides, eager", [
    ("vllm", {EAGER: True}, True),  # rollout.enforce_eager alone
    ("vllm", {EAGER: False, VLLM_EAGER: True}, True),  # engine_kwargs.vllm alone turns graph mode off
    ("vllm", {EAGER: True, VLLM_EAGER: False}, False),  # in conflict: vLLM gets engine_kwargs.vllm's value
    ("vllm", {EAGER: True, VLLM_EAGER: None}, True),  # a None there is dropped by upstream: the field counts
    ("hf", {EAGER: False, VLLM_EAGER: True}, False),  # the hf server never reads engine_kwargs.vllm
])
def test_graph_mode_is_the_enforce_eager_vllm_is_handed(make, engine, overrides, eager):
    """verl 0.9.1's vLLM server spreads engine_kwargs.vllm over the rollout fields it maps, so the
    graph-mode fact (and the task-queue level chosen from it) follows the value that reaches vLLM."""
    profile = resolve_env_profile(make(**{ENGINE: engine, **overrides}), environ={})
    rollout = profile.settings["rollout"]["TASK_QUEUE_ENABLE"]
    assert (rollout.value, rollout.reason.startswith("eager rollout")) == (("2", True) if eager else ("1", False))
