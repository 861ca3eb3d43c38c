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


VALUES = [("max_num_batched_tokens", "abc"), ("max_num_batched_tokens", 8192), ("max_num_batched_tokens", 8192.0),
          ("max_num_batched_tokens", True), ("enforce_eager", True), ("enforce_eager", "abc"), ("enforce_eager", 1),
          ("kv_cache_dtype", "fp8"), ("kv_cache_dtype", "bogus"), ("gpu_memory_utilization", "x"),
          ("gpu_memory_utilization", 0.5), ("cudagraph_capture_sizes", [1, 2]), ("cudagraph_capture_sizes", ["a"]),
          ("max_logprobs", "4"), ("load_format", 3), ("seed", "x"), ("dtype", "bogus")]


def test_value_types_judge_as_vllms_own_parser_does():
    """Each value as upstream passes it on (its build_cli_args_from_config) through the real `vllm serve` parser."""
    pytest.importorskip("vllm.engine.arg_utils", reason="vLLM not installed")
    import contextlib
    import io

    from verl.workers.rollout.vllm_rollout.utils import build_cli_args_from_config
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    declared, _ = rules_engine.vllm_arg_types()

    def parses(key, value) -> bool:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parser.parse_args(["model", *build_cli_args_from_config({key: value})])
            return True
        except SystemExit:
            return False

    verdicts = {(k, repr(v)): (rules_engine.value_fits(declared[k], v), parses(k, v)) for k, v in VALUES}
    assert all(ours == theirs for ours, theirs in verdicts.values()), verdicts
    assert {ours for ours, _ in verdicts.values()} == {True, False}


def test_values_go_unchecked_with_a_note_where_vllm_cannot_be_imported(monkeypatch):
    pytest.importorskip("vllm.engine.arg_utils", reason="vLLM not installed: its option names cannot be read")
    monkeypatch.setattr(rules_engine, "vllm_arg_types", lambda: (None, "importing vllm.engine.arg_utils failed (X)"))
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "engine_kwargs": {"vllm": {
        "max_num_batched_tokens": "abc", "enforce_eager": "abc"}}}}})
    (note,) = rules_engine.engine_kwargs_problems(config)
    assert note.severity == "info" and "values not type-checked: importing vllm.engine.arg_utils failed" in note.message
