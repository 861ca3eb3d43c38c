"""Reward-path rules: DAPO's overlong reward shaping must sit where upstream 0.9.1 reads it.

In 0.9.1 the only reader of overlong shaping is the reward-loop manager ``dapo``
(``verl/experimental/reward_loop/reward_manager/dapo.py``), and it reads exactly
``reward.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor,log}`` and
``reward.reward_kwargs.max_resp_len``. Older scripts put the same settings under
``reward_model.*``: that section still composes ("for backward compatibility") but upstream's
``main_ppo`` never calls ``migrate_legacy_reward_impl``, so every value there is silently dropped —
the run trains without the penalty the user asked for (the failure reported in upstream #4268).
That finding is a warning, not a refusal: upstream runs such a script (two of its published NPU DAPO
scripts are such) without stopping, and a refusal here would be one upstream does not make.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from verl_ascend.checks.findings import ERROR, INFO, WARN, Finding
from verl_ascend.checks.view import ConfigView

# Top-level legacy sections upstream's main_ppo no longer reads, and where each setting lives now.
LEGACY_SECTIONS = ("reward_model", "custom_reward_function", "sandbox_fusion")
LEGACY_MOVES = {
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.overlong_buffer": "reward.reward_kwargs.overlong_buffer_cfg",
    "reward_model.reward_kwargs": "reward.reward_kwargs",
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.reward_loop_source": "reward.reward_manager.source",
    "reward_model.reward_loop_module_path": "reward.reward_manager.module.path",
    "reward_model.reward_loop_class_name": "reward.reward_manager.module.name",
    "reward_model.model.path": "reward.reward_model.model_path",
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.enable_resource_pool": "reward.reward_model.enable_resource_pool",
    "reward_model.n_gpus_per_node": "reward.reward_model.n_gpus_per_node",
    "reward_model.nnodes": "reward.reward_model.nnodes",
    "reward_model.rollout": "reward.reward_model.rollout",
    "custom_reward_function": "reward.custom_reward_function",
    "sandbox_fusion": "reward.sandbox_fusion",
}
# What the dapo manager reads; anything else under these keys is dead configuration.
REWARD_KWARGS_READ = ("overlong_buffer_cfg", "max_resp_len")
OVERLONG_CFG_READ = ("enable", "len", "penalty_factor", "log")
OVERLONG_CFG_REQUIRED = ("enable", "len", "penalty_factor")
SHAPING_MANAGER = "dapo"


def legacy_reward_keys(view: ConfigView) -> Iterator[Finding]:
    """Any value set under reward_model.* / custom_reward_function.* / sandbox_fusion.*."""
    moves = []
    keys = []
    for section in LEGACY_SECTIONS:
        for key, _value in _set_leaves(view.get(section), section):
            keys.append(key)
            moves.append(f"{key} -> {new_home(key)}")
    if keys:
        yield Finding(
            "legacy_reward_keys_ignored",
            WARN,
            "these legacy keys compose but upstream 0.9.1's main_ppo never reads them (no migration on the "
            "V1 path): the run uses reward.*'s values instead, as upstream would (upstream #4268). To have them "
            "take effect, move them: "
            + "; ".join(moves),
            tuple(keys),
        )


def overlong_keys(view: ConfigView) -> Iterator[Finding]:
    """Overlong settings the reward manager in use would never read."""
    kwargs = view.get("reward.reward_kwargs") or {}
    if not isinstance(kwargs, dict):
        return
    manager = view.get("reward.reward_manager.name", "naive")
    source = view.get("reward.reward_manager.source", "register")
    stray = sorted(set(kwargs) - set(REWARD_KWARGS_READ))
    if stray:
        yield Finding(
            "overlong_keys_ignored",
            ERROR,
            f"reward.reward_kwargs.{{{', '.join(stray)}}} is read by nothing in upstream 0.9.1 (the dapo manager "
            f"reads only {' and '.join(REWARD_KWARGS_READ)}): the setting would be silently dropped. Use "
            "reward.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor,log} and "
            "reward.reward_kwargs.max_resp_len.",
            tuple(f"reward.reward_kwargs.{k}" for k in stray),
        )
    buffer = kwargs.get("overlong_buffer_cfg")
    if buffer is None:
        return
    if not isinstance(buffer, dict):
        yield Finding(
            "overlong_keys_ignored",
            ERROR,
            "reward.reward_kwargs.overlong_buffer_cfg must be a mapping with enable, len, penalty_factor (and log).",
            ("reward.reward_kwargs.overlong_buffer_cfg",),
        )
        return
    unknown = sorted(set(buffer) - set(OVERLONG_CFG_READ))
    missing = [k for k in OVERLONG_CFG_REQUIRED if buffer.get(k) is None]
    if unknown or (missing and buffer.get("enable")):
        parts = []
        if unknown:
            parts.append(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} never read")
        if missing and buffer.get("enable"):
            verb = "is" if len(missing) == 1 else "are"
            parts.append(f"{', '.join(missing)} {verb} missing (the manager fails on it)")
        yield Finding(
            "overlong_keys_ignored",
            ERROR,
            f"reward.reward_kwargs.overlong_buffer_cfg: {'; '.join(parts)}. The dapo manager reads exactly "
            f"{', '.join(OVERLONG_CFG_READ)}.",
            tuple(f"reward.reward_kwargs.overlong_buffer_cfg.{k}" for k in unknown + missing),
        )
    if not buffer.get("enable"):
        return
    if source == "register" and manager != SHAPING_MANAGER:
        yield Finding(
            "overlong_keys_ignored",
            ERROR,
            f"overlong shaping is enabled but reward.reward_manager.name={manager!r}: only the {SHAPING_MANAGER!r} "
            "manager applies it, so no response would ever be penalised for length. Set "
            f"reward.reward_manager.name={SHAPING_MANAGER}.",
            ("reward.reward_manager.name", "reward.reward_kwargs.overlong_buffer_cfg.enable"),
        )
    elif source != "register":
        yield Finding(
            "overlong_keys_ignored",
            INFO,
            f"reward manager comes from {source!r} ({view.get('reward.reward_manager.module.path')}): "
            "the doctor cannot tell whether it reads reward.reward_kwargs.overlong_buffer_cfg.",
            ("reward.reward_manager.source",),
        )


def overlong_buffer_length(view: ConfigView) -> Iterator[Finding]:
    """The buffer must fit the response budget it is carved out of (upstream asserts ``len <= max_resp_len``),
    and should be shorter than it (equal: every response is penalised from its first token)."""
    buffer = view.get("reward.reward_kwargs.overlong_buffer_cfg") or {}
    if not isinstance(buffer, dict) or not buffer.get("enable"):
        return
    length = _as_int(buffer.get("len"))
    max_resp = _as_int(view.get("reward.reward_kwargs.max_resp_len"))
    response = view.get_int("data.max_response_length")
    keys = (
        "reward.reward_kwargs.overlong_buffer_cfg.len",
        "reward.reward_kwargs.max_resp_len",
        "data.max_response_length",
    )
    if max_resp is None:
        yield Finding(
            "overlong_buffer_too_long",
            ERROR,
            "overlong shaping is enabled but reward.reward_kwargs.max_resp_len is not set: the dapo manager "
            "refuses to start. Set it to ${data.max_response_length}.",
            keys,
        )
        return
    if length is None or length <= 0:
        yield Finding(
            "overlong_buffer_too_long",
            ERROR,
            f"overlong_buffer_cfg.len={buffer.get('len')!r}: the buffer must be a positive token count "
            "(the dapo manager refuses to start otherwise). Disable shaping with enable=false instead.",
            keys,
        )
        return
    limits = [max_resp] + ([response] if response is not None else [])
    if length > max_resp:
        yield Finding(
            "overlong_buffer_too_long",
            ERROR,
            f"overlong_buffer_cfg.len={length} is longer than reward.reward_kwargs.max_resp_len={max_resp}: upstream's "
            "dapo reward manager asserts max_resp_len >= overlong_buffer.len when it starts "
            "(verl/experimental/reward_loop/reward_manager/dapo.py). Use a buffer well inside the budget, e.g. "
            "DAPO's 4096 of 20480, or lower len when you shorten data.max_response_length.",
            keys,
        )
    elif length >= min(limits):
        yield Finding(
            "overlong_buffer_too_long",
            WARN,
            f"overlong_buffer_cfg.len={length} is not shorter than the maximum response length ({min(limits)}): "
            f"upstream accepts it, and the penalty then starts at token {max_resp - length} and hits every "
            "response. Use a buffer well inside the budget, e.g. DAPO's 4096 of 20480.",
            keys,
        )


def overlong_length_mismatch(view: ConfigView) -> Iterator[Finding]:
    """max_resp_len is where the penalty reaches its maximum; it should be the real response limit."""
    buffer = view.get("reward.reward_kwargs.overlong_buffer_cfg") or {}
    if not isinstance(buffer, dict) or not buffer.get("enable"):
        return
    max_resp = _as_int(view.get("reward.reward_kwargs.max_resp_len"))
    response = view.get_int("data.max_response_length")
    if max_resp is not None and response is not None and max_resp != response:
        yield Finding(
            "overlong_max_resp_len_mismatch",
            WARN,
            f"reward.reward_kwargs.max_resp_len={max_resp} but data.max_response_length={response}: the penalty "
            "ramp is placed for a different length than responses are cut at, so it starts too early or never "
            "reaches full strength. Set reward.reward_kwargs.max_resp_len=${data.max_response_length}.",
            ("reward.reward_kwargs.max_resp_len", "data.max_response_length"),
        )


RULES = (legacy_reward_keys, overlong_keys, overlong_buffer_length, overlong_length_mismatch)


def _set_leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _set_leaves(value, f"{prefix}.{key}")
    elif node is not None and node != [] and node != {}:
        yield prefix, node


def new_home(key: str) -> str:
    for old in sorted(LEGACY_MOVES, key=len, reverse=True):
        if key == old or key.startswith(old + "."):
            return LEGACY_MOVES[old] + key[len(old) :]
    return "reward." + key.split(".", 1)[1] if "." in key else "reward"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
