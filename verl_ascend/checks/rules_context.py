"""Context rule: a prompt plus a full response must fit the model's positions and vLLM's max_model_len.

A DAPO job with 20K-token responses on a checkpoint trained for 32K positions fits; the same job
on an instruct variant, or with a larger response budget, does not, and vLLM refuses to start
(or, with its long-context override, generates garbage past the trained positions). The model's
limit is read from the local ``config.json``; with no local model the rule says it was skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from verl_ascend.checks.findings import ERROR, INFO, Finding
from verl_ascend.checks.view import ROLLOUT, ConfigView

MODEL_PATH = "actor_rollout_ref.model.path"


def model_context_limit(config_json: dict) -> int | None:
    """Trained positions, extended by a rope-scaling factor when the config declares one (YaRN etc.)."""
    limit = config_json.get("max_position_embeddings")
    if not isinstance(limit, int):
        text_config = config_json.get("text_config")
        return model_context_limit(text_config) if isinstance(text_config, dict) else None
    scaling = config_json.get("rope_scaling") or {}
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    original = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) else None
    if isinstance(factor, int | float) and factor > 1 and isinstance(original, int):
        limit = max(limit, int(original * factor))
    return limit


def context_length(view: ConfigView) -> Iterator[Finding]:
    need = view.sequence_budget
    if need is None:
        return
    keys = ("data.max_prompt_length", "data.max_response_length")
    max_model_len = view.get_int(f"{ROLLOUT}.max_model_len")
    if max_model_len is not None and max_model_len < need:
        yield Finding(
            "context_overflow",
            ERROR,
            f"rollout.max_model_len={max_model_len} is below max_prompt_length + max_response_length = {need}: vLLM "
            "cannot hold a full-length sequence. Raise max_model_len (or leave it null) or shorten the lengths.",
            keys + (f"{ROLLOUT}.max_model_len",),
        )
    raw_path = view.get(MODEL_PATH)
    config_file = Path(str(raw_path)).expanduser() / "config.json" if raw_path else None
    if config_file is None or not config_file.is_file():
        yield Finding(
            "context_overflow",
            INFO,
            f"skipped: no local {config_file or 'model path'} to read max_position_embeddings from "
            f"({MODEL_PATH}={raw_path!r}); the {need}-token budget was not checked against the model.",
            (MODEL_PATH,),
        )
        return
    try:
        limit = model_context_limit(json.loads(config_file.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or not UTF-8 (model_unusable names it at launch)
        yield Finding("context_overflow", INFO, f"skipped: cannot read {config_file} ({exc}).", (MODEL_PATH,))
        return
    if limit is None:
        yield Finding(
            "context_overflow", INFO, f"skipped: {config_file} has no max_position_embeddings.", (MODEL_PATH,)
        )
        return
    if need > limit:
        yield Finding(
            "context_overflow",
            ERROR,
            f"max_prompt_length + max_response_length = {need} tokens exceeds the model's context of {limit} "
            f"(max_position_embeddings in {config_file}): vLLM refuses such a max_model_len, and positions past "
            f"the trained range are meaningless. Keep the sum <= {limit}, e.g. lower data.max_response_length.",
            keys + (MODEL_PATH,),
        )


RULES = (context_length,)
