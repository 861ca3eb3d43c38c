"""Checks that run in the driver before Ray starts, so bad input fails in seconds, not after
minutes of cluster start-up, with a message naming the key, file or row at fault.

Upstream checks most of this too, but deep inside Ray actors (an assertion in a worker's
traceback) or only after the cluster has started. Each check raises ``PreflightError`` naming the
culprit; :data:`RULES` (at the end) makes each one a rule of the one pipeline
(``verl_ascend.checks.validate``), which reports every culprit at once: the message becomes an error
finding unchanged, and upstream's ``validate_config`` assertion one that quotes what upstream said. The batch arithmetic is the
layout rule ``rules_layout.batch_divisibility`` (one formula, with Ulysses).

These checks know upstream verl's config only (model, data, upstream's own validation); the recipe
registers its own (typed keys, rollout-tail policy, checkpoint destination) through the entry point
group ``verl_ascend.checks``.
"""

from __future__ import annotations

import json
import os

from omegaconf import DictConfig

from verl_ascend.checks.pipeline import INPUTS, from_check


class PreflightError(ValueError):
    """A configuration or input problem found before any Ray actor starts."""


SAMPLE_PROMPT = [{"role": "user", "content": "What is 3 + 4?"}]


def check_model(config: DictConfig) -> None:
    """The model folder holds a config and a tokenizer that load and tokenise a prompt to tokens:
    transformers builds an *empty* tokenizer from a folder without tokenizer files, and then
    every prompt counts 0 tokens and passes every length check."""
    path = os.path.expanduser(str(config.actor_rollout_ref.model.path))
    key = "actor_rollout_ref.model.path"
    if not os.path.isdir(path):
        raise PreflightError(
            f"{key}={path!r} does not exist. Expected a local directory holding a "
            "transformers model (config.json + weights); nothing is downloaded from a hub at run time."
        )
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise PreflightError(
            f"{key}={path!r} has no config.json. Expected a transformers model directory "
            "as written by save_pretrained()."
        )
    try:
        with open(config_file, "rb") as f:
            raw = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PreflightError(f"{key}: {config_file!r} is not valid JSON ({exc}); expected save_pretrained()'s config.json") from exc
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise PreflightError(f"{key}: {config_file!r} names no model_type; expected save_pretrained()'s config.json")
    trust = bool(config.actor_rollout_ref.model.get("trust_remote_code", False))
    tokenizer_path = os.path.expanduser(str(config.actor_rollout_ref.model.get("tokenizer_path") or path))
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(path, trust_remote_code=trust)
        from verl.utils import hf_tokenizer

        tokenizer = hf_tokenizer(tokenizer_path, trust_remote_code=trust)
        text = tokenizer.apply_chat_template(SAMPLE_PROMPT, add_generation_prompt=True, tokenize=False) \
            if getattr(tokenizer, "chat_template", None) else SAMPLE_PROMPT[0]["content"]
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    except Exception as exc:  # transformers raises many types for a broken folder
        raise PreflightError(
            f"{key}={path!r}: the model config or tokenizer does not load ({type(exc).__name__}: {exc}); "
            "expected a folder written by save_pretrained() with config.json and tokenizer files"
        ) from exc
    if not ids or len(tokenizer) == 0:
        raise PreflightError(
            f"{key}={tokenizer_path!r}: the tokenizer turns a sample prompt into {len(ids)} tokens (vocabulary "
            f"{len(tokenizer)}): its tokenizer files (tokenizer.json / tokenizer_config.json / vocab) are missing or empty"
        )


def check_data(config: DictConfig, max_rows_checked: int | None = None) -> None:
    """Every dataset file is readable parquet and every row is usable (``data_check.py``): prompt
    a non-empty chat of UTF-8 text within ``data.max_prompt_length`` tokens (counted with the
    model's tokenizer and chat template, as upstream's dataset does), ``data_source``,
    ``reward_model.ground_truth``. A bad row names file, row and field; ``data.skip_bad_rows=true``
    drops bad rows instead and logs how many."""
    from verl_ascend.checks.data_check import DataError, check_all_files

    try:
        check_all_files(config)
    except DataError as exc:
        raise PreflightError(str(exc)) from exc


def run_upstream_validation(config: DictConfig) -> None:
    """Upstream's own ``validate_config``, with its assertions turned into a named error."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError) as exc:
        raise PreflightError(f"upstream verl rejected the configuration: {exc}") from exc


def check_upstream_objects(config: DictConfig) -> None:
    """verl's own config dataclasses build from this config (their validation runs here, not in Ray)."""
    from verl_ascend.checks.effective import UpstreamConfigError, build_upstream_configs

    try:
        build_upstream_configs(config)
    except UpstreamConfigError as exc:
        raise PreflightError(str(exc)) from exc


# -- the checks above as rules of the one pipeline (upstream's config dataclasses are built by
# rules_effective.upstream_config_objects, a gate rule)

upstream_validate_config = from_check("upstream_validate_config", run_upstream_validation, (PreflightError,))
model_unusable = from_check("model_unusable", check_model, (PreflightError,), stage=INPUTS)
data_rows_bad = from_check("data_rows_bad", check_data, (PreflightError,), stage=INPUTS, needs=("model_unusable",))

RULES = (model_unusable, data_rows_bad, upstream_validate_config)
