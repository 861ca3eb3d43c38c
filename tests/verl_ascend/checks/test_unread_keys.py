"""The unread-keys analysis (scripts/verl_unread_keys.py) on the installed verl, its hand-checked
precision, and the doctor's rules that use its list (``keys_never_read``), on in-process configs.

The analysis parses verl's source once per module (seconds); the configs are composed once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import verl
from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend import checks
from verl_ascend.checks.effective import UNREAD_KEYS_PATH, EffectiveValues
from tests.verl_ascend.checks.test_doctor import variant

compose = RECIPE.compose

REPO = Path(__file__).resolve().parents[3]
HAND_CHECKED = Path(__file__).with_name("fixtures") / "unread_keys_hand_checked.yaml"
ACTOR, REF, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("verl_unread_keys", REPO / "scripts" / "verl_unread_keys.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses need their module registered
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def analysis(script):
    return script.analyse(Path(verl.__file__).parent)


@pytest.fixture(scope="module")
def npu():
    return compose("dapo_qwen25_32b_npu")


def verdict(analysis, key: str) -> str:
    found = analysis.read_by(key)
    if found is None:
        return "unread"
    if found == "all":
        return "read"
    return "engine:" + ";".join(f"{sel}={','.join(values)}" for sel, values in found.items())


def test_committed_list_is_what_the_analysis_derives(script, analysis):
    committed = yaml.safe_load(UNREAD_KEYS_PATH.read_text())
    fresh = script.unread_keys(Path(verl.__file__).parent)
    assert committed["unread"] == fresh["unread"]
    assert committed["engine_only"] == fresh["engine_only"]
    assert committed["keys_analysed"] == len(analysis.keys.defaults) > 1000  # every section, nested keys too


def test_every_section_and_nested_keys_are_analysed(analysis):
    tops = {key.split(".", 1)[0] for key in analysis.keys.defaults}
    assert {"actor_rollout_ref", "data", "critic", "reward", "algorithm", "trainer"} <= tops
    assert "actor_rollout_ref.actor.checkpoint.save_contents" in analysis.keys.defaults
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size" in analysis.keys.defaults  # engine sub-configs
    assert "FSDPActorConfig" in analysis.keys.targets[REF]  # the ref's class, from its _target_


@pytest.mark.parametrize(
    "key, expected",
    [
        # getattr(self.engine_config, "use_no_sync_for_gradient_accumulation", ...)
        (f"{ACTOR}.fsdp_config.use_no_sync_for_gradient_accumulation", "read"),
        (f"{ROLLOUT}.router_config_path", "read"),  # getattr(self.rollout_config, "router_config_path", None)
        (f"{REF}.ulysses_sequence_parallel_size", "read"),  # FSDPActorConfig.__post_init__ copies it
        (f"{ROLLOUT}.layered_summon", "read"),  # .get("layered_summon", False)
        (f"{ACTOR}.grad_clip", "unread"),
        (f"{ROLLOUT}.skip_tokenizer_init", f"engine:{ROLLOUT}.name=sglang,trtllm"),  # vLLM hard-codes False
    ],
)
def test_each_read_form(analysis, key, expected):
    assert verdict(analysis, key) == expected


def test_agrees_with_the_hand_checked_keys(analysis):
    """Every hand-checked key gets the verdict recorded for it, and the recorded figures are exact."""
    data = yaml.safe_load(HAND_CHECKED.read_text())
    entries = data["keys"]
    assert {k: verdict(analysis, k) for k in entries} == {k: e["analysis"] for k, e in entries.items()}
    for name, subset in (("all", entries), ("random", {k: e for k, e in entries.items() if e.get("sample") == "random"})):
        assert data["figures"][name] == figures(subset), name


def figures(entries: dict) -> dict:
    said = {k for k, e in entries.items() if e["analysis"] == "unread"}
    truth = {k for k, e in entries.items() if e["hand"] == "unread"}
    called_read = set(entries) - said
    return {
        "checked": len(entries),
        "agreed": sum(e["hand"] == e["analysis"] for e in entries.values()),
        "unread_precision": round(len(said & truth) / len(said), 3),
        "unread_recall": round(len(said & truth) / len(truth), 3),
        "read_precision": round(len(called_read - truth) / len(called_read), 3),
    }


def test_hand_checked_sample_goes_both_ways():
    entries = yaml.safe_load(HAND_CHECKED.read_text())["keys"]
    said = {k for k, e in entries.items() if e["analysis"] == "unread"}
    # both ways: the sample holds keys the analysis calls unread and keys it calls read
    assert len(said) >= 10 and len(entries) - len(said) >= 10


# --- the doctor's rule on in-process configs -------------------------------------------------------------


def found(cfg, *rules):
    return [f for f in checks.validate(cfg, {}) if f.rule in rules]


UNREAD_RULES = ("switch_not_reaching_consumer", "key_never_read", "key_read_by_other_engine")


@pytest.mark.parametrize(
    "updates",
    [
        {f"{ACTOR}.use_kl_loss": True, f"{ACTOR}.ulysses_sequence_parallel_size": 8, f"{REF}.ulysses_sequence_parallel_size": 8},
        {f"{ACTOR}.fsdp_config.use_no_sync_for_gradient_accumulation": True},
        {f"{ROLLOUT}.router_config_path": "/tmp/router.yaml"},
    ],
    ids=["ref-sp-equal-to-actor", "use-no-sync", "router-config-path"],
)
def test_no_finding_where_the_key_is_read(npu, updates):
    cfg = variant(npu, updates)
    hits = [f for f in found(cfg, *UNREAD_RULES) if any(k in f.keys for k in updates)]
    assert hits == []


def test_consumer_value_is_the_effective_one(npu):
    """The 32B config's actor SP (8) reaches fsdp_config only through __post_init__: quote 8, not the composed 1."""
    cfg = variant(npu, {f"{ACTOR}.ulysses_sequence_parallel_size": 8})
    key = f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size"
    assert OmegaConf.select(cfg, key) == 1 and EffectiveValues(cfg).get(key) == 8
    # the ref is built as upstream builds it: an FSDPActorConfig whose engine config receives its SP size
    ref = variant(npu, {f"{REF}.ulysses_sequence_parallel_size": 4})
    assert EffectiveValues(ref).get(f"{REF}.fsdp_config.ulysses_sequence_parallel_size") == 4
    (hit,) = found(variant(npu, {f"{ACTOR}.grad_clip": 0.5}), "switch_not_reaching_consumer")
    assert "actor_rollout_ref.actor.optim.clip_grad (= 1.0)" in hit.message and hit.severity == "error"


def test_ref_keys_only_when_the_ref_runs(npu):
    key = f"{REF}.use_torch_compile"
    assert found(variant(npu, {key: False}), *UNREAD_RULES) == []  # DAPO runs no reference policy
    (hit,) = found(variant(npu, {key: False, f"{ACTOR}.use_kl_loss": True}), "switch_not_reaching_consumer")
    assert f"{REF}.fsdp_config.use_torch_compile (= True)" in hit.message


def test_key_read_only_by_another_engine(npu):
    key = f"{ROLLOUT}.skip_tokenizer_init"
    (hit,) = found(variant(npu, {key: False}), "key_read_by_other_engine")
    assert hit.severity == "warn" and key in hit.keys
    assert f"read by {ROLLOUT}.name=sglang/trtllm only" in hit.message and f"this run uses {ROLLOUT}.name=vllm" in hit.message
    assert found(variant(npu, {key: False, f"{ROLLOUT}.name": "sglang"}), "key_read_by_other_engine") == []


def test_legacy_keys_and_the_doctor_in_one_report(capsys):
    """Item 5: the legacy-key message and every other culprit in one report, not one per try."""
    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl_ascend.launch.commands import doctor as doctor_cli
    from verl_ascend.run.config_utils import legacy_report, split_argv

    argv = ["--config-name", "dapo_qwen25_32b_npu", "reward_model.overlong_buffer.len=8", f"{ACTOR}.grad_clip=0.5",
            "hydra.run.dir=."]
    assert split_argv(argv, RECIPE.default_config) == ("dapo_qwen25_32b_npu", argv[2:4])
    report = legacy_report(RECIPE.config_dir, *split_argv(argv, RECIPE.default_config))
    assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in report
    assert "switch_not_reaching_consumer" in report and "REFUSED (2 error(s)" in report
    assert legacy_report(RECIPE.config_dir, "dapo_qwen25_32b_npu", [f"{ACTOR}.grad_clip=0.5"]) is None  # the normal path decides
    assert doctor_cli(argv[:4]) == 2  # the doctor's command line: the same one report
    assert "switch_not_reaching_consumer" in capsys.readouterr().out
