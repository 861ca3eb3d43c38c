"""The one validation pipeline (``verl_ascend.checks.validate``): a provider's rules run through the
entry-point group, every culprit is named at once, and ``DRY_RUN=1`` and ``verl-ascend
doctor`` reach the same verdict on the same config with real files.

In-process, no Ray: each test composes the tiny config (real model, tokenizer and data files).
"""

from __future__ import annotations

import io
import os

import pytest

from verl_ascend import checks
from verl_ascend.checks.findings import ERROR, Finding
from verl_ascend.checks.pipeline import tag
from verl_ascend.checks import exits

TAIL = "trainer.v1.dapo_ascend.rollout_tail"


@pytest.fixture
def tiny_env(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_ASCEND_TINY_DIR", str(tiny_dir))
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(tmp_path / "out"))
    for var in ("VERL_ASCEND_DOCTOR_STRICT", "VERL_ASCEND_DOCTOR_IGNORE", "VERL_ASCEND_DOCTOR", "VERL_FILE_LOGGER_PATH"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def tiny(overrides=()):
    from recipe.dapo_ascend.main_dapo import RECIPE

    return RECIPE.compose("dapo_tiny_cpu", list(overrides))


def _fake_provider(monkeypatch, *rules):
    """An installed distribution whose ``verl_ascend.checks`` entry point registers ``rules``."""
    import importlib.metadata

    class EntryPoint:
        name = "fake"

        def load(self):
            return lambda: checks.register(*rules)

    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == checks.ENTRY_POINT_GROUP:
            return [*real(**kw), EntryPoint()]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(checks, "_registered", [])
    monkeypatch.setattr(checks, "_entry_points_loaded", False)


def test_a_rule_registered_by_a_provider_runs(tiny_env, monkeypatch):
    def fake_rule(view):
        yield Finding("fake_rule", ERROR, f"fake provider saw data.train_batch_size={view.get('data.train_batch_size')}",
                      ("data.train_batch_size",), accepted="anything else")

    _fake_provider(monkeypatch, fake_rule)
    found = checks.validate(tiny())
    (hit,) = [f for f in found if f.rule == "fake_rule"]
    assert "data.train_batch_size=" in hit.message and "accepted: anything else" in str(hit)
    assert fake_rule in checks.rules()
    # the backend's and the recipe's own providers were loaded too
    assert {"config_types", "rollout_tail_policy"} <= {r.__name__ for r in checks.rules()}


def test_a_gate_error_holds_back_rules_that_trust_types(tiny_env, monkeypatch):
    seen = []

    def trusting(view):
        seen.append(int(view.config.data.train_batch_size))
        return ()

    _fake_provider(monkeypatch, tag(trusting, trusts_config=True))
    found = checks.validate(tiny(["data.train_batch_size=abc"]))
    assert [f.rule for f in found if f.severity == ERROR] == ["config_types"]
    assert "data.train_batch_size='abc'" in found[0].message and not seen
    assert any(f.rule == "checks_skipped" and "trusting" in f.message for f in found)


def test_every_culprit_is_named_at_once(tiny_env):
    """Three independent problems (batch arithmetic, rollout-tail policy, checkpoint policy): one refusal names all.
    (A key out of its declared range is a gate error instead, which holds back the rules that trust types.)"""
    from verl_ascend import launch
    from verl_ascend.checks.preflight import PreflightError

    config = tiny(["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                   f"{TAIL}.enable=true", "trainer.v1.trainer_mode=colocate_async", "trainer.save_freq=0"])
    with pytest.raises(PreflightError) as caught:
        launch.check(config)
    text = str(caught.value)
    for needle in ("data.train_batch_size=10", "ppo_mini_batch_size=4", f"{TAIL}.enable=True",
                   "trainer.save_freq=0"):
        assert needle in text, (needle, text)
    rules = {f.rule for f in checks.validate(config, inputs=True) if f.severity == ERROR}
    assert {"batch_not_divisible", "rollout_tail_ignored", "destination_unusable"} <= rules
    assert not (tiny_env / "out").exists()  # the checks change nothing in the output folder
    (typed,) = [f for f in checks.validate(tiny([f"{TAIL}.over_provision=0.5"]), inputs=True) if f.severity == ERROR]
    assert typed.rule == "config_types" and f"{TAIL}.over_provision=0.5: accepted: a number >= 1.0" in typed.message


def test_upstream_validate_config_assertion_becomes_a_finding(tiny_env, monkeypatch):
    import verl.utils.config

    def refuse(**_):
        raise AssertionError("real_train_batch_size (7) must be divisible by minimal possible batch size (2)")

    monkeypatch.setattr(verl.utils.config, "validate_config", refuse)
    (hit,) = [f for f in checks.validate(tiny()) if f.rule == "upstream_validate_config"]
    assert hit.severity == ERROR and "upstream verl rejected the configuration: real_train_batch_size (7)" in hit.message


@pytest.mark.parametrize("overrides, refused", [
    ([], False),
    (["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4"], True),  # batch arithmetic
    ([f"{TAIL}.max_staleness=0"], True),  # rollout-tail range (was preflight only)
    (["actor_rollout_ref.rollout.n=0"], True),  # typed keys
    (["trainer.use_v1=False"], True),  # a doctor rule
])
def test_dry_run_and_doctor_reach_the_same_verdict(tiny_env, capsys, overrides, refused):
    from verl_ascend.launch import commands

    dry = commands.dry_run(tiny(overrides), environ=dict(os.environ), out=io.StringIO())
    doc = commands.doctor(["--config-name", "dapo_tiny_cpu", *overrides])
    capsys.readouterr()
    assert dry == doc == (exits.REFUSED if refused else exits.OK), (dry, doc)  # one exit table
    # and the launch's checks agree on the config part
    assert bool(checks.refusal(checks.validate(tiny(overrides), inputs=False), False)) == refused
