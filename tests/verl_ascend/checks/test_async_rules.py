"""verl_ascend.checks.rules_async: what upstream's separate_async trainer asserts inside Ray, refused before it.

Each rule runs on the recipe's real configs (the 32B NPU job with its separate_async preset, and the tiny CPU
config) changed only in the keys it is about; the doctor's exit status is the checks' table (2: refused).
"""

from __future__ import annotations

import pytest

from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend.launch.commands import doctor as doctor_cli
from verl_ascend import checks
from verl_ascend.checks import effective, rules_async
from verl_ascend.checks.exits import OK, REFUSED

compose = RECIPE.compose

NO_ENV: dict[str, str] = {}
SEPARATE = ["+pools=npu_separate_128"]  # the 32B job's preset: trainer_mode separate_async, 4 + 12 nodes, nccl
SYNC_STEP = "trainer.v1.separate_async.parameter_sync_step"
MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"


def findings(config_name: str, overrides: list[str], rule: str):
    config = compose(config_name, overrides)
    return [f for f in checks.validate(config, NO_ENV) if f.rule == rule]


def test_the_preset_is_accepted_and_each_mode_rule_stays_quiet():
    config = compose("dapo_qwen25_32b_npu", SEPARATE)
    found = checks.validate(config, NO_ENV)
    assert [f for f in found if f.severity == "error"] == []
    # the one separate_async finding is the note of the nodes it takes (4 + 12, the 16 of the script)
    assert [(f.rule, f.severity) for f in found if f.rule.startswith("separate_async")] == [
        ("separate_async_nodes", "info")]


@pytest.mark.parametrize("override,values", [
    (f"{SYNC_STEP}=4", "data.train_batch_size=512, trainer.v1.separate_async.parameter_sync_step=4, "
                       "actor_rollout_ref.actor.ppo_mini_batch_size=32: 4 x 32 = 128 != 512"),
    (f"{MINI}=16", "data.train_batch_size=512, trainer.v1.separate_async.parameter_sync_step=16, "
                   "actor_rollout_ref.actor.ppo_mini_batch_size=16: 16 x 16 = 256 != 512"),
])
def test_batch_arithmetic_names_upstreams_formula_and_the_three_values(override, values):
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, override], "separate_async_batch")
    assert finding.severity == "error"
    assert "train_batch_size == parameter_sync_step * ppo_mini_batch_size" in finding.message
    assert values in finding.message and "trainer_separate_async.py" in finding.message
    assert finding.keys == ("data.train_batch_size", SYNC_STEP, MINI)
    assert f"{SYNC_STEP}=" in finding.accepted


def test_batch_arithmetic_in_the_doctor_exits_refused(capsys, monkeypatch):
    monkeypatch.delenv("VERL_ASCEND_DOCTOR_STRICT", raising=False)
    argv = ["--config-name", "dapo_qwen25_32b_npu", *SEPARATE]
    assert doctor_cli(argv) == OK
    capsys.readouterr()
    assert doctor_cli([*argv, f"{SYNC_STEP}=4"]) == REFUSED == 2
    assert "[error] separate_async_batch:" in capsys.readouterr().out


def test_parameter_sync_step_below_one_is_refused():
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{SYNC_STEP}=0"], "separate_async_batch")
    assert finding.severity == "error" and finding.accepted == "an integer >= 1"


def test_other_modes_need_a_divisor_of_the_batch():
    over = ["trainer.v1.trainer_mode=colocate_async", "+trainer.v1.colocate_async.parameter_sync_step=3"]
    (finding,) = findings("dapo_qwen25_32b_npu", over, "parameter_sync_step_divides")
    assert finding.severity == "error" and "train_batch_size % parameter_sync_step == 0" in finding.message
    assert finding.keys == ("trainer.v1.colocate_async.parameter_sync_step", "data.train_batch_size")
    assert findings("dapo_qwen25_32b_npu", over[:1] + ["+trainer.v1.colocate_async.parameter_sync_step=4"],
                    "parameter_sync_step_divides") == []


@pytest.mark.parametrize("key", ["actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node"])
def test_rollout_pool_sizes_must_be_positive(key):
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{key}=0"], "separate_async_rollout_pool")
    assert finding.severity == "error" and finding.keys == (key,) and "> 0" in finding.message


def test_a_rollout_pool_smaller_than_one_replica_is_refused_and_a_ragged_one_warned():
    pool = "actor_rollout_ref.rollout"
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{pool}.nnodes=1", f"{pool}.n_gpus_per_node=4"],
                          "separate_async_rollout_pool")
    assert finding.severity == "error" and "4 // 8 = 0" in finding.message
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{pool}.nnodes=3", f"{pool}.n_gpus_per_node=4"],
                          "separate_async_rollout_pool")
    assert finding.severity == "warn" and "4 card(s) stay idle" in finding.message


def test_a_prefill_decode_replica_is_sized_as_upstreams_llm_server_sizes_it():
    """verl/workers/rollout/llm_server.py: with disaggregation one replica is (TP x prefill_replicas + decode TP x
    decode_replicas) x DP x PP cards. One 8-card rollout node holds one TP-8 replica, but no TP-8 prefill + TP-8
    decode pair (16 cards): upstream makes 0 standalone replicas."""
    pool, disagg = "actor_rollout_ref.rollout", "actor_rollout_ref.rollout.disaggregation"
    one_node = [*SEPARATE, f"{pool}.nnodes=1", f"{disagg}.enabled=true"]
    (finding,) = findings("dapo_qwen25_32b_npu", one_node, "separate_async_rollout_pool")
    assert finding.severity == "error" and "8 // 16 = 0" in finding.message
    assert "(prefill TP 8 x 1 + decode TP 8 x 1) x DP 1 x PP 1" in finding.message
    assert f"{disagg}.decode_replicas" in finding.keys
    assert findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{pool}.nnodes=1"], "separate_async_rollout_pool") == []
    # 12 nodes of 8: six pairs, each prefill TP 8 + decode TP 4 x 2 = 16 cards: 96 // 16 = 6, none idle
    pairs = [*SEPARATE, f"{disagg}.enabled=true", f"+{disagg}.decode_tensor_model_parallel_size=4",
             f"{disagg}.decode_replicas=2"]
    assert findings("dapo_qwen25_32b_npu", pairs, "separate_async_rollout_pool") == []
    shown = effective.mode_settings(compose("dapo_qwen25_32b_npu", pairs))
    assert "6 standalone replica(s) at (prefill TP 8 x 1 + decode TP 4 x 2)" in str(shown)


def test_the_naive_engine_is_refused_in_separate_async():
    backend = "actor_rollout_ref.rollout.checkpoint_engine.backend"
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{backend}=naive"], "separate_async_engine")
    assert finding.severity == "error" and finding.keys == (backend,) and "nccl" in finding.accepted
    assert findings("dapo_qwen25_32b_npu", [f"{backend}=naive"], "separate_async_engine") == []  # sync: its default


def test_a_colocated_reward_model_is_refused():
    over = [*SEPARATE, "reward.reward_model.enable=true", "reward.reward_model.enable_resource_pool=false"]
    (finding,) = findings("dapo_qwen25_32b_npu", over, "separate_async_reward_model")
    assert finding.severity == "error" and "reward.reward_model.enable_resource_pool" in finding.keys


def test_hybrid_switch_with_disaggregation_is_refused_and_without_hybrid_replicas_warned():
    switch = "trainer.v1.separate_async.hybrid_rollout.enable_switch=true"
    over = [*SEPARATE, switch, "actor_rollout_ref.rollout.disaggregation.enabled=true"]
    (finding,) = findings("dapo_qwen25_32b_npu", over, "separate_async_hybrid_switch")
    assert finding.severity == "error" and "ValueError" in finding.message
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, switch, "actor_rollout_ref.hybrid_engine=false"],
                          "separate_async_hybrid_switch")
    assert finding.severity == "warn"


def test_hybrid_engine_off_outside_separate_async_is_a_warning():
    (finding,) = findings("dapo_qwen25_32b_npu", ["actor_rollout_ref.hybrid_engine=false"], "hybrid_engine_off")
    assert finding.severity == "warn" and "trainer.v1.trainer_mode" in finding.keys
    assert findings("dapo_qwen25_32b_npu", [*SEPARATE, "actor_rollout_ref.hybrid_engine=false"], "hybrid_engine_off") == []


def test_hybrid_engine_off_in_separate_async_is_refused_while_upstreams_setup_would_crash(tmp_path, monkeypatch):
    """verl 0.9.1's _setup logs with logger.info(..., flush=True) in the hybrid_engine=false branch: the rule
    reads that from the installed source, and goes quiet for a source without the keyword."""
    import logging

    source = rules_async.upstream_path(rules_async.SEPARATE_ASYNC_SOURCE).read_text()
    assert "flush=True" in source  # what the refusal is about, in the installed upstream
    shown = logging.getLogger("verl_ascend.test.flush")
    shown.setLevel(logging.INFO)  # upstream's module logger logs INFO (VERL_LOGGING_LEVEL default)
    with pytest.raises(TypeError, match="flush"):
        shown.info("x", flush=True)
    off = [*SEPARATE, "actor_rollout_ref.hybrid_engine=false"]
    (finding,) = findings("dapo_qwen25_32b_npu", off, "separate_async_hybrid_off_crash")
    assert finding.severity == "error" and "actor_rollout_ref.hybrid_engine" in finding.keys
    assert "TypeError" in finding.message and "hybrid_engine=true" in finding.accepted
    assert findings("dapo_qwen25_32b_npu", SEPARATE, "separate_async_hybrid_off_crash") == []
    assert findings("dapo_qwen25_32b_npu", ["actor_rollout_ref.hybrid_engine=false"],
                    "separate_async_hybrid_off_crash") == []
    # the way out: the trainer's logger above INFO skips the line (Logger.info checks the level first)
    quiet = logging.getLogger("verl_ascend.test.flush.quiet")
    quiet.setLevel(logging.WARNING)
    quiet.info("x", flush=True)
    assert "VERL_LOGGING_LEVEL=WARN" in finding.accepted
    warn = [*off, "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_LOGGING_LEVEL=WARN"]
    assert findings("dapo_qwen25_32b_npu", warn, "separate_async_hybrid_off_crash") == []
    debug = [*off, "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_LOGGING_LEVEL=DEBUG"]
    assert [f.severity for f in findings("dapo_qwen25_32b_npu", debug, "separate_async_hybrid_off_crash")] == ["error"]

    fixed = tmp_path / rules_async.SEPARATE_ASYNC_SOURCE
    fixed.parent.mkdir(parents=True)
    fixed.write_text(source.replace("flush=True,", ""))
    monkeypatch.setattr(rules_async, "upstream_path", lambda rel: tmp_path / rel)
    rules_async.separate_async_setup_logs_with_flush.cache_clear()
    try:
        assert findings("dapo_qwen25_32b_npu", off, "separate_async_hybrid_off_crash") == []
    finally:
        rules_async.separate_async_setup_logs_with_flush.cache_clear()


def test_warmup_batches_below_zero_warn_as_upstream_skips_them():
    """Upstream's _add_async_warmup_batches returns for num_warmup_batches <= 0: -1 is no warmup, not a crash."""
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, "trainer.v1.separate_async.num_warmup_batches=-1"],
                          "warmup_batches_range")
    assert finding.severity == "warn" and "skips a value <= 0" in finding.message
    source = rules_async.upstream_path("trainer/ppo/v1/trainer_base.py").read_text()
    assert "num_warmup_batches <= 0:" in source  # what the warning says, in the installed upstream
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, "trainer.v1.separate_async.num_warmup_batches=lots"],
                          "warmup_batches_range")
    assert finding.severity == "error"


def test_engine_names_come_from_upstreams_registry_and_hccl_is_named_nccl():
    names = rules_async.upstream_engine_names()
    assert {"naive", "nccl", "nixl", "mooncake"} <= set(names) and "hccl" not in names
    assert rules_async.engine_class_on("nccl", "npu") == ("HCCLCheckpointEngine", "verl/checkpoint_engine/hccl_checkpoint_engine.py")
    assert rules_async.engine_class_on("nccl", "cuda")[0] == "NCCLCheckpointEngine"
    backend = "actor_rollout_ref.rollout.checkpoint_engine.backend"
    (finding,) = findings("dapo_qwen25_32b_npu", [*SEPARATE, f"{backend}=hccl"], "checkpoint_engine_unknown")
    assert finding.severity == "error" and "registers under the name 'nccl'" in finding.message
    assert "'nccl'" in finding.accepted


def test_on_cpu_the_platforms_launch_defaults_are_notes_not_refusals():
    """The CPU platform fills in the rollout pool and the gloo engine before the launch's checks
    (verl/cpu/config_defaults.py, registered by verl/cpu/checks.py); the doctor does not apply them."""
    found = [f for f in checks.validate(compose("dapo_tiny_cpu", ["trainer.v1.trainer_mode=separate_async"]), NO_ENV)
             if f.rule in ("separate_async_rollout_pool", "separate_async_engine")]
    assert found and {f.severity for f in found} == {"info"}
    assert all("filled in at launch" in f.message for f in found)


def test_the_dry_run_section_shows_pools_engine_bucket_and_sync_frequency():
    values = effective.mode_settings(compose("dapo_qwen25_32b_npu", SEPARATE))
    assert values["trainer pool (trainer.nnodes x trainer.n_gpus_per_node)"].startswith("4 x 8 = 32 cards")
    assert values["rollout pool (actor_rollout_ref.rollout.nnodes x actor_rollout_ref.rollout.n_gpus_per_node)"] \
        .startswith("12 x 8 = 96 cards, 12 standalone replica(s) at TP 8")
    assert values["cards in all"] == 128
    engine = values["weight-sync engine (actor_rollout_ref.rollout.checkpoint_engine.backend)"]
    assert engine.startswith("nccl -> HCCLCheckpointEngine (verl/checkpoint_engine/hccl_checkpoint_engine.py) on npu")
    assert values["weight-sync bucket (actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes)"] \
        .startswith("2048 MB")
    assert values[f"weight sync frequency ({SYNC_STEP})"].startswith("once per step, after 16 mini-batch update(s)")
    assert effective.mode_settings(compose("dapo_qwen25_32b_npu")) == {}  # sync: the dry run as it was
