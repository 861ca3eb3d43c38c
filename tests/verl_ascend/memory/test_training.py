"""The training half of the memory plan: architecture input, phases, and the plan against real runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from verl_ascend.memory.terms import PlanInputError

CONFIG_DIR = Path(__file__).resolve().parents[3] / "recipe" / "dapo_ascend" / "config"
TOLERANCE = 0.05


def _compose(name: str, overrides: dict | None = None):
    from verl_ascend.run.config_utils import compose

    return compose(name, [f"{k}={v}" for k, v in (overrides or {}).items()], CONFIG_DIR)


def _config(model_path) -> dict:
    return {"actor_rollout_ref": {"model": {"path": str(model_path)}}}


# ------------------------------------------------------------------ the architecture
def test_a_local_folder_gives_its_own_config_json(tiny_dir):
    from verl_ascend.memory.training import load_architecture

    hf = load_architecture(_config(tiny_dir / "model"))
    assert (hf.model_type, hf.hidden_size, hf.num_hidden_layers, hf.vocab_size) == ("qwen2", 64, 2, 16)


def test_the_32b_job_plans_from_the_shipped_config_json_without_a_checkpoint():
    from verl_ascend.memory.training import architecture_file, load_architecture

    config = _compose("dapo_qwen25_32b_npu")
    assert not Path(config.actor_rollout_ref.model.path).expanduser().exists()
    hf = load_architecture(config)
    assert architecture_file(config.actor_rollout_ref.model.path).parent.name == "architectures"
    assert (hf.num_hidden_layers, hf.hidden_size, hf.intermediate_size) == (64, 5120, 27648)
    assert (hf.num_attention_heads, hf.num_key_value_heads, hf.vocab_size) == (40, 8, 152064)
    assert hf.tie_word_embeddings is False
    assert load_architecture(_config("Qwen/Qwen2.5-32B-Instruct")).hidden_size == 5120


def test_a_folder_without_config_json_is_refused_naming_key_and_folder(tmp_path):
    from verl_ascend.memory.training import load_architecture

    with pytest.raises(PlanInputError) as info:
        load_architecture(_config(tmp_path))
    assert "actor_rollout_ref.model.path" in str(info.value) and str(tmp_path) in str(info.value)
    assert "config.json" in str(info.value)


def test_an_unknown_name_without_a_folder_lists_the_shipped_ones(tmp_path):
    from verl_ascend.memory.training import load_architecture

    with pytest.raises(PlanInputError, match="Qwen2.5-32B") as info:
        load_architecture(_config(tmp_path / "Llama-9000B"))
    assert "Llama-9000B" in str(info.value)


@pytest.mark.parametrize("edit, culprit", [
    ({"model_type": "no_such_model"}, "model_type 'no_such_model'"),
    ({"architectures": ["NoSuchForCausalLM"]}, "NoSuchForCausalLM"),
])
def test_an_unknown_architecture_is_refused_naming_the_file(tiny_dir, tmp_path, edit, culprit):
    from verl_ascend.memory.training import load_architecture

    data = json.loads((tiny_dir / "model" / "config.json").read_text())
    data.update(edit)
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(PlanInputError, match=culprit) as info:
        load_architecture(_config(tmp_path))
    assert str(tmp_path / "config.json") in str(info.value)


def test_unreadable_json_is_refused_naming_the_file(tmp_path):
    from verl_ascend.memory.training import load_architecture

    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(PlanInputError, match="not readable JSON") as info:
        load_architecture(_config(tmp_path))
    assert str(tmp_path / "config.json") in str(info.value)


# ------------------------------------------------------------------ the phases
def _tiny(tiny_dir, **overrides):
    return _compose("dapo_tiny_cpu", {"tiny_dir": tiny_dir, "trainer.n_gpus_per_node": 2, **overrides})


def test_phases_follow_upstreams_conditions(tiny_dir):
    from verl_ascend.memory.training import plan_training

    plain = plan_training(_tiny(tiny_dir))
    assert [p.name for p in plain] == ["old log-prob", "actor update"]
    assert {p.role for p in plain} == {"actor_rollout"}
    with_kl = plan_training(_tiny(tiny_dir), overrides={"actor_rollout_ref.actor.use_kl_loss": True})
    assert [p.name for p in with_kl] == ["old log-prob", "ref log-prob", "actor update"]
    ref = with_kl[1]
    assert ref.host and ref.host[0].name.startswith("reference parameters")
    bypass = plan_training(_tiny(tiny_dir), overrides={"algorithm.rollout_correction.bypass_mode": True})
    assert [p.name for p in bypass] == ["actor update"]


def test_the_update_holds_model_state_and_names_the_budget_keys(tiny_dir):
    from verl_ascend.memory.training import plan_training

    update = plan_training(_tiny(tiny_dir))[-1]
    resident = {t.name: t for t in update.resident}
    assert {"sharded parameters", "optimizer states"} <= set(resident)
    # AdamW: two fp32 states per parameter (+ a step count each), of the half each rank holds.
    assert resident["optimizer states"].bytes >= 2 * resident["sharded parameters"].bytes
    activations = next(t for t in update.active if t.name == "activations")
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in activations.keys
    assert update.peak == sum(t.bytes for t in update.resident + update.active)


def test_optimizer_offload_moves_the_log_prob_phases_states_to_the_host(tiny_dir):
    from verl_ascend.memory.training import plan_training

    kept = plan_training(_tiny(tiny_dir))[0]
    offloaded = plan_training(_tiny(tiny_dir), overrides={
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True})[0]
    state = next(t for t in kept.resident if t.name == "optimizer states")
    assert not any(t.name == "optimizer states" for t in offloaded.resident)
    # per card, like every phase's host terms: the plan multiplies by the node's cards once (residency.host_per_node)
    assert offloaded.host[0].bytes == state.bytes
    assert kept.peak - offloaded.peak == state.bytes


def test_the_switches_act_in_the_trace(tiny_dir, tmp_path):
    """Checkpointing cuts activations, chunking cuts the vocabulary-wide term, Ulysses halves the tokens."""
    from verl_ascend.memory.train_cases import ulysses_model
    from verl_ascend.memory.train_step import StepShape
    from verl_ascend.memory.train_trace import VOCAB_ACT, trace

    data = json.loads((ulysses_model(tiny_dir / "model", tmp_path) / "config.json").read_text())
    data["vocab_size"] = 1024  # wide enough for the entropy's softmax to show
    base = StepShape(architecture=json.dumps(data, sort_keys=True), world_size=2, sp=1, tokens=512, seq_len=16,
                     response_len=8, param_dtype="fp32")
    plain = trace(base)
    assert trace(dataclasses.replace(base, gradient_checkpointing=True)).get("Activation") < 0.6 * plain.get(
        "Activation")
    entropy = dataclasses.replace(base, forward_only=True, calculate_entropy=True)
    assert trace(dataclasses.replace(entropy, entropy_chunk=64)).get(VOCAB_ACT) < 0.5 * trace(entropy).get(VOCAB_ACT)
    halved = trace(dataclasses.replace(base, sp=2)).get("Activation")
    assert 0.4 < halved / plain.get("Activation") < 0.6


def test_on_an_npu_the_log_probs_take_the_fused_cross_entropys_values_and_memory(tiny_dir, tmp_path):
    """trainer.device=npu traces torch_npu's fused cross-entropy: verl's numbers, one [tokens, vocab] tensor
    kept forward (the op's log_prob output) and no row loop in the backward."""
    import torch

    from verl.utils.torch_functional import logprobs_from_logits_naive
    from verl_ascend.memory.train_cases import ulysses_model
    from verl_ascend.memory.train_step import StepShape, _npu_cross_entropy_log_probs
    from verl_ascend.memory.train_trace import VOCAB_ACT, trace
    from verl_ascend.memory.training import phase_shapes

    logits = torch.randn(2, 5, 11, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(0))
    grad = torch.randn(2, 5, dtype=torch.float64)
    fused, reference = _npu_cross_entropy_log_probs(logits, labels), logprobs_from_logits_naive(logits, labels)
    assert torch.allclose(fused, reference)
    assert torch.allclose(*(torch.autograd.grad(out, logits, grad)[0] for out in (fused, reference)))

    data = json.loads((ulysses_model(tiny_dir / "model", tmp_path) / "config.json").read_text())
    data["vocab_size"] = 1024
    base = StepShape(architecture=json.dumps(data, sort_keys=True), world_size=2, sp=1, tokens=512, seq_len=16,
                     response_len=8, param_dtype="fp32")
    on_npu = dataclasses.replace(base, fused_cross_entropy=True)
    assert trace(on_npu).peak < trace(base).peak  # the CPU's row loop holds every row's gradient at once
    one = 512 * 1024 * 4  # one fp32 [tokens, vocab] tensor
    kept = trace(dataclasses.replace(on_npu, forward_only=True)).get(VOCAB_ACT)
    assert abs(kept - 2 * one) < 0.01 * one  # the logits and the op's log_prob
    assert {s.fused_cross_entropy for s in phase_shapes(_tiny(tiny_dir)).values()} == {False}
    # what the stand-in models, read from the installed verl: on an NPU the fused op, reduction none, per row
    import inspect

    from verl.utils import torch_functional

    dispatch = inspect.getsource(torch_functional.logprobs_from_logits)
    assert "elif NPU_CROSS_ENTROPY_LOSS_AVAILABLE:\n        output = logprobs_from_logits_torch_npu(" in dispatch
    fused_path = inspect.getsource(torch_functional.logprobs_from_logits_torch_npu)
    assert 'npu_cross_entropy_loss(logits, labels.reshape(-1), reduction="none")' in fused_path
    npu = phase_shapes(_tiny(tiny_dir), overrides={"trainer.device": "npu"})
    assert {s.fused_cross_entropy for s in npu.values()} == {True}


# ------------------------------------------------------------------ against real runs
@pytest.fixture(scope="module")
def measured_cases(tiny_dir, tmp_path_factory):
    """{case name: (planned, measured)} for every case: 2 gloo ranks per case, forks of one fork server."""
    from verl_ascend.memory.train_cases import CASES, case_overrides
    from verl_ascend.memory.train_measure import measure_all
    from verl_ascend.memory.train_trace import trace
    from verl_ascend.memory.training import phase_shapes

    config = _compose("dapo_tiny_cpu", {"tiny_dir": tiny_dir})
    scratch = tmp_path_factory.mktemp("cases")
    shapes = [phase_shapes(config, overrides=case_overrides(case, tiny_dir / "model", scratch))[case.phase]
              for case in CASES]
    measured = measure_all(shapes)
    return {case.name: (trace(shape).peak, got) for case, shape, got in zip(CASES, shapes, measured)}


@pytest.mark.e2e  # real gloo ranks for every case (15 s on 2 cores)
@pytest.mark.parametrize("case", __import__("verl_ascend.memory.train_cases", fromlist=["CASES"]).CASES,
                         ids=lambda case: case.name)
def test_the_planned_peak_is_within_5_percent_of_the_measured_one(measured_cases, case):
    planned, measured = measured_cases[case.name]
    assert abs(planned - measured.live) <= TOLERANCE * measured.live, (case.name, planned, measured)
