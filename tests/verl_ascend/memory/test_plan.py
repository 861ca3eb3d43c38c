"""The plan of the shipped configs (real files, composed as the launch composes them): its phases per
trainer mode, what stays resident, the device declaration and its override, and the verdict.

The outcomes asserted here do not hinge on the training planner's precision: 65536 tokens of a 32B
model on one card are far over any 64 GB card whatever the trace says, and the residency and rollout
terms come from this package's own accounting."""

from __future__ import annotations

import pytest

from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend.memory.plan import plan
from verl_ascend.memory.terms import GIB, PlanInputError

BIG = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
ENV = {}  # no HCCL_BUFFSIZE, no VLLM_CPU_KVCACHE_SPACE: the declared defaults


def compose(*overrides, name="dapo_qwen25_32b_npu"):
    return RECIPE.compose(name, list(overrides))


@pytest.fixture(scope="module")
def shipped():
    return plan(compose(), ENV)


def test_the_shipped_32b_job_fits_a_910b(shipped):
    assert shipped.fits and shipped.card.name.startswith("Ascend 910B")
    assert shipped.card.bytes == int(61.3 * GIB)
    assert {p.name for p in shipped.phases} >= {"rollout", "weight update", "actor update", "old log-prob"}
    assert {p.role for p in shipped.phases} == {"actor_rollout"}  # sync: one pool


def test_65536_tokens_of_a_32b_on_one_card_is_refused_naming_phase_and_key():
    refused = plan(compose(f"{BIG}=65536"), ENV)
    assert not refused.fits
    over = {p.name for p in refused.over}
    assert "actor update" in over
    phase = next(p for p in refused.over if p.name == "actor update")
    assert BIG in refused.culprit(phase).keys
    assert "'actor update'" in refused.verdict() and BIG in refused.verdict()


def test_what_stays_resident_while_the_actor_trains(shipped):
    """free_cache_engine (NPU: sleep level 1) leaves the engine's communicators on the card and its
    weights on the host; with it off, the engine keeps weights and KV cache through training."""
    update = next(p for p in shipped.phases if p.name == "actor update")
    names = {t.name for t in update.resident}
    assert "sleeping engine (HCCL buffers)" in names and "KV cache (awake)" not in names
    assert any(t.name == "engine weights (slept to host)" and t.bytes == shipped.rollout.weights.bytes
               for t in update.host)
    awake = plan(compose("actor_rollout_ref.rollout.free_cache_engine=false"), ENV)
    update = next(p for p in awake.phases if p.name == "actor update")
    kv = next(t for t in update.resident if t.name == "KV cache (awake)")
    assert kv.bytes == awake.rollout.kv_cache.bytes > 0


def test_offloaded_actor_is_on_the_host_during_rollout(shipped):
    rollout = next(p for p in shipped.phases if p.name == "rollout")
    assert not [t for t in rollout.resident if t.name.startswith("actor")]
    assert {t.name for t in rollout.host} >= {"actor sharded parameters (offloaded)"}
    kept = plan(compose("actor_rollout_ref.actor.fsdp_config.param_offload=false",
                        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false"), ENV)
    rollout_kept = next(p for p in kept.phases if p.name == "rollout")
    assert rollout_kept.peak > next(p for p in shipped.phases if p.name == "rollout").peak
    assert kept.host_per_node < shipped.host_per_node


def test_separate_async_plans_each_pool_and_the_weight_sync():
    sep = plan(compose("trainer.v1.trainer_mode=separate_async", "+pools=npu_separate_128",
                       "actor_rollout_ref.rollout.nnodes=12", "trainer.nnodes=4"), ENV)
    roles = {(p.name, p.role) for p in sep.phases}
    assert {("actor update", "trainer"), ("rollout", "rollout"), ("weight sync (receive)", "rollout"),
            ("weight update", "trainer")} <= roles
    assert sep.rollout.replicas == 12 * 8 // 8
    receive = next(p for p in sep.phases if p.name == "weight sync (receive)")
    bucket = next(t for t in receive.active if "bucket" in t.name)
    assert "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes" in bucket.keys


def test_hccl_buffsize_where_workers_read_it(shipped):
    """2 x HCCL_BUFFSIZE per communicator: the job's runtime env first, then the launching shell."""
    assert shipped.card.comm_buffer_bytes == 2 * 200 * 1024**2
    assert plan(compose(), {"HCCL_BUFFSIZE": "100"}).card.comm_buffer_bytes == 2 * 100 * 1024**2
    job = plan(compose("+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_BUFFSIZE=50"), {"HCCL_BUFFSIZE": "100"})
    assert job.card.comm_buffer_bytes == 2 * 50 * 1024**2
    with pytest.raises(PlanInputError, match="HCCL_BUFFSIZE='0'.*integer number of MB >= 1"):
        plan(compose(), {"HCCL_BUFFSIZE": "0"})


@pytest.mark.parametrize("value, needle", [
    ("0", "memory.device_gib=0"), ("-4", "memory.device_gib=-4"), ("lots", "memory.device_gib='lots'"),
])
def test_a_device_memory_of_zero_negative_or_text_is_refused_naming_the_key(value, needle):
    with pytest.raises(PlanInputError) as exc:
        plan(compose(f"memory.device_gib={value}"), ENV)
    assert needle in str(exc.value) and "a positive number of GiB" in str(exc.value)


def test_device_choice_and_override():
    a3 = plan(compose("memory.device=a3"), ENV)
    assert a3.card.name == "Ascend A3 die"
    with pytest.raises(PlanInputError, match="memory.device='h100'.*accepted: auto, 910b, a3"):
        plan(compose("memory.device=h100"), ENV)
    small = plan(compose("memory.device_gib=32"), ENV)
    assert small.card.bytes == 32 * GIB and small.card.source == "memory.device_gib=32.0"


def test_a_model_folder_without_config_json_is_named(tmp_path):
    with pytest.raises(PlanInputError, match="actor_rollout_ref.model.path"):
        plan(compose(f"actor_rollout_ref.model.path={tmp_path}"), ENV)


def test_the_tiny_cpu_configs_fit_their_host_share(tiny_dir):
    tiny = plan(compose(f"tiny_dir={tiny_dir}", name="dapo_tiny_cpu"), ENV)
    assert tiny.fits and tiny.card.name == "CPU host share"
    vllm = plan(compose(f"tiny_dir={tiny_dir}", "actor_rollout_ref.rollout.name=vllm", name="dapo_tiny_cpu"), ENV)
    assert vllm.rollout.kv_cache.bytes == GIB and vllm.rollout.num_blocks == GIB // (128 * vllm.rollout.kv_bytes_per_token)


def test_the_cluster_checks_host_memory_cell_needs_the_plans_host_set(shipped):
    """``verl-ascend cluster``'s host-memory cell needs what this plan puts on the host per node: the 32B
    job's offloaded actor states and, while the actor trains, the slept engine's weights, which an
    offload-only count misses. With memory.check=false the offload count stands in and says why."""
    from verl_ascend.cluster.job import host_bytes

    params = 32_763_876_352
    need, why = host_bytes(compose(), params, 16, ENV)
    assert need == shipped.host_per_node > 0 and "memory plan" in why
    estimate = params * 12 // 16
    assert need > estimate
    need, why = host_bytes(compose("memory.check=false"), params, 16, ENV)
    assert need == estimate and "memory.check=false" in why
