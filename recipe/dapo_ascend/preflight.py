"""Checks that run in the driver before Ray starts, so bad input fails in seconds, not after
minutes of cluster start-up, with a message naming the key, file or row at fault.

Upstream checks most of this too, but deep inside Ray actors (an assertion in a worker's
traceback) or only after the cluster has started. Here each problem raises
``PreflightError``; the entry point prints it and exits with status 2.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig


class PreflightError(ValueError):
    """A configuration or input problem found before any Ray actor starts."""


def check_model(config: DictConfig) -> None:
    path = os.path.expanduser(str(config.actor_rollout_ref.model.path))
    if not os.path.isdir(path):
        raise PreflightError(
            f"actor_rollout_ref.model.path={path!r} does not exist. Expected a local directory holding a "
            "transformers model (config.json + weights); nothing is downloaded from a hub at run time."
        )
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise PreflightError(
            f"actor_rollout_ref.model.path={path!r} has no config.json. Expected a transformers model directory "
            "as written by save_pretrained()."
        )


def check_data(config: DictConfig, max_rows_checked: int | None = None) -> None:
    """Every dataset file is readable parquet and every row is usable (``data_check.py``): prompt
    a non-empty chat of UTF-8 text within ``data.max_prompt_length`` tokens (counted with the
    model's tokenizer and chat template, as upstream's dataset does), ``data_source``,
    ``reward_model.ground_truth``. A bad row names file, row and field; ``data.skip_bad_rows=true``
    drops bad rows instead and logs how many."""
    from recipe.dapo_ascend.data_check import check_all_files

    check_all_files(config, PreflightError)


def check_batch_sizes(config: DictConfig) -> None:
    """Batch sizes must split evenly across mini-batches and ranks (upstream asserts this in workers)."""
    data, actor, rollout, trainer = (
        config.data,
        config.actor_rollout_ref.actor,
        config.actor_rollout_ref.rollout,
        config.trainer,
    )
    world = int(trainer.n_gpus_per_node) * int(trainer.nnodes)
    bsz, mini, n = int(data.train_batch_size), int(actor.ppo_mini_batch_size), int(rollout.n)
    if mini <= 0 or bsz % mini != 0:
        raise PreflightError(
            f"data.train_batch_size={bsz} is not divisible by actor_rollout_ref.actor.ppo_mini_batch_size={mini}; "
            f"accepted: a ppo_mini_batch_size that divides {bsz} (e.g. {', '.join(map(str, _divisors(bsz)))})"
        )
    if (mini * n) % world != 0:
        raise PreflightError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini} x actor_rollout_ref.rollout.n={n} = {mini * n} "
            f"responses per mini-batch cannot be split over {world} ranks (trainer.nnodes x trainer.n_gpus_per_node); "
            f"accepted: a multiple of {world} responses per mini-batch"
        )
    # Upstream splits each rank's share into micro-batches and asserts they divide it evenly.
    if not actor.get("use_dynamic_bsz", False):
        shares = (
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", actor.get("ppo_micro_batch_size_per_gpu"),
             mini * n // world, "mini-batch"),
            ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
             rollout.get("log_prob_micro_batch_size_per_gpu"), bsz * n // world, "step"),
        )
        for key, micro, per_rank, what in shares:
            if micro is not None and (int(micro) <= 0 or per_rank % int(micro) != 0):
                raise PreflightError(
                    f"{key}={micro} does not divide the {per_rank} responses each rank gets per {what}; "
                    f"accepted: one of {_divisors(per_rank)}"
                )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0][:8]


def run_upstream_validation(config: DictConfig) -> None:
    """Upstream's own ``validate_config``, with its assertions turned into a named error."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError) as exc:
        raise PreflightError(f"upstream verl rejected the configuration: {exc}") from exc


def check_rollout_tail(config: DictConfig) -> None:
    """``trainer.v1.dapo_ascend.rollout_tail`` settings are in range (``rollout_tail/policy.py``)."""
    from recipe.dapo_ascend.rollout_tail.policy import TailPolicy, TailPolicyError

    try:
        TailPolicy.from_config(config)
    except (TailPolicyError, TypeError) as exc:
        raise PreflightError(str(exc)) from exc


def check_upstream_objects(config: DictConfig) -> None:
    """verl's own config dataclasses build from this config (their validation runs here, not in Ray)."""
    from verl.ascend.effective import UpstreamConfigError, build_upstream_configs

    try:
        build_upstream_configs(config)
    except UpstreamConfigError as exc:
        raise PreflightError(str(exc)) from exc


def check_all(config: DictConfig) -> None:
    check_upstream_objects(config)
    check_rollout_tail(config)
    check_model(config)
    check_data(config)
    check_batch_sizes(config)
    run_upstream_validation(config)
