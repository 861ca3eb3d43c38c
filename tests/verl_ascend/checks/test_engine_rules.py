"""The rollout-engine rules read the installed vLLM's option names from its source (no import): they
must be the options its real `vllm serve` parser takes, and `rollout.name` unset must be named."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_ascend.checks import rules_engine


def test_option_names_are_what_vllm_serve_parses():
    pytest.importorskip("vllm.engine.arg_utils", reason="vLLM not installed")
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parsed = {a.dest for a in make_arg_parser(FlexibleArgumentParser())._actions} - {"help", "model_tag"}
    names = rules_engine.vllm_serve_options()
    assert parsed <= names  # every real option is accepted
    assert len(names - parsed) <= 5, sorted(names - parsed)  # a few dataclass fields without a flag


def test_unset_rollout_name_is_named_with_the_registry():
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "???"}}})
    (finding,) = rules_engine.name_problems(config)
    assert finding.rule == "rollout_name_unset" and "'hf'" in finding.message and "'vllm'" in finding.message
    message = rules_engine.driver_refusal(config)
    assert message.startswith("actor_rollout_ref.rollout.name is not set (mandatory")
    assert rules_engine.driver_refusal(OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "hf"}}})) is None


def test_engine_kwargs_of_other_engines_are_not_checked_against_vllm():
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "hf", "engine_kwargs": {"vllm": {"x": 1}}}}})
    assert rules_engine.engine_kwargs_problems(config) == []
