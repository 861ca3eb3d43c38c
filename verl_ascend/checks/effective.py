"""Effective settings: each switch's value at the place upstream verl 0.9.1 consumes it.

Why: checking the key a user *set* proves nothing (``actor.use_torch_compile=false`` is read by
nothing; the FSDP engine reads ``actor.fsdp_config.use_torch_compile``). So, in the driver and
before Ray, this module builds the objects upstream's workers build from the composed config --
verl's own config dataclasses, whose ``__post_init__`` validation then runs here too (a bad
``rollout.mode`` fails now with upstream's message, not inside a Ray actor) -- and reads:

- the actor's FSDP engine config (``FSDPEngineConfig``, read by
  ``verl/workers/engine/fsdp/transformer_impl.py``) and optimiser config;
- the vLLM engine arguments verl's rollout server would pass (``vllm_async_server.py``: the
  rollout config's fields plus ``engine_kwargs.vllm`` verbatim, with the env profile's
  ``additional_config`` merged in as ``apply_to_config`` delivers it);
- the environment of each role (the env profile, given by the caller: this package imports no backend).

Used by ``DRY_RUN=1`` (printed), preflight (:func:`build_upstream_configs`) and the doctor
(``rules_effective``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
ENGINE_FIELDS = (
    "strategy",
    "use_torch_compile",
    "entropy_from_logits_with_chunking",
    "forward_prefetch",
    "param_offload",
    "optimizer_offload",
    "fsdp_size",
    "ulysses_sequence_parallel_size",
)
# RolloutConfig field -> vLLM engine argument, as vllm_async_server.py maps them.
VLLM_ARGS = {
    "tensor_model_parallel_size": "tensor_parallel_size",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "enforce_eager": "enforce_eager",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_sleep_mode": "enable_sleep_mode",
}


# The two spellings of vLLM's graph-mode switch, the one vLLM obeys first (see rollout_enforce_eager).
ENFORCE_EAGER_KEYS = (f"{ROLLOUT}.engine_kwargs.vllm.enforce_eager", f"{ROLLOUT}.enforce_eager")


def rollout_enforce_eager(read: Callable[[str], Any]) -> Any:
    """The ``enforce_eager`` the rollout engine is handed; ``read(key)`` gives a config value or None.

    verl 0.9.1's vLLM server (``vllm_async_server.py``) builds vLLM's arguments from the rollout
    fields first and then spreads ``engine_kwargs.vllm`` over them (its None values dropped), so with
    ``rollout.name=vllm`` a non-None ``engine_kwargs.vllm.enforce_eager`` wins over
    ``rollout.enforce_eager``. No engine named yet (a base config: verl requires one at launch) reads
    as vLLM, the Ascend stack's engine; any other engine never reads ``engine_kwargs.vllm``.
    """
    if read(f"{ROLLOUT}.name") in ("vllm", None):
        value = read(ENFORCE_EAGER_KEYS[0])
        if value is not None:
            return value
    return read(ENFORCE_EAGER_KEYS[1])


class UpstreamConfigError(ValueError):
    """verl's own config dataclass refused a section; ``key`` is the section, the message is upstream's."""

    def __init__(self, key: str, cause: BaseException):
        self.key = key
        super().__init__(f"{key}: upstream verl rejected it while building its config object: {cause}")


def build_upstream_configs(config: DictConfig) -> dict[str, Any]:
    """``{"actor": FSDPActorConfig, "rollout": RolloutConfig}`` built as verl's workers build them."""
    from verl.utils.config import omega_conf_to_dataclass

    built = {}
    for name, key in (("actor", ACTOR), ("rollout", ROLLOUT)):
        node = OmegaConf.select(config, key)
        if node is None:
            continue
        try:
            built[name] = omega_conf_to_dataclass(node)
        except Exception as exc:  # upstream raises ValueError/AssertionError/TypeError/InstantiationException
            cause = exc.__cause__ or exc
            raise UpstreamConfigError(key, cause) from exc
    return built


def vllm_engine_args(rollout, profile=None) -> dict[str, Any]:
    """The vLLM engine arguments verl's rollout server derives from ``rollout`` (the switches among them)."""
    args = {arg: getattr(rollout, field) for field, arg in VLLM_ARGS.items()}
    kwargs = dict((rollout.engine_kwargs or {}).get("vllm") or {})
    args.update({k: v for k, v in kwargs.items() if v is not None})
    if profile is not None and profile.additional_config:  # the user's keys plus the table's, as delivered
        args["additional_config"] = profile.additional_config_values()
    return args


def _flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        return [item for k, v in value.items() for item in _flatten(f"{prefix}.{k}", v)]
    return [(prefix, value)]


def effective_settings(config: DictConfig, profile: Any = None) -> dict[str, dict[str, Any]]:
    """Section title -> {consumed key: value}; raises :class:`UpstreamConfigError`.

    ``profile`` is the device backend's env profile for this config (the Ascend backend's
    ``verl.ascend.env.profile.evaluate_env_profile``), injected by the caller: it adds vLLM's
    ``additional_config`` and the target stack. None leaves both out.
    """
    built = build_upstream_configs(config)
    sections: dict[str, dict[str, Any]] = {}
    actor = built.get("actor")
    if actor is not None:
        engine = {f"{ACTOR}.fsdp_config.{f}": getattr(actor.fsdp_config, f, None) for f in ENGINE_FIELDS}
        engine[f"{ACTOR}.optim.clip_grad"] = actor.optim.clip_grad
        sections["actor engine (FSDPEngineConfig + optimizer, read by verl/workers/engine/fsdp)"] = engine
    rollout = built.get("rollout")
    if rollout is not None and rollout.name == "vllm":
        args = vllm_engine_args(rollout, profile)
        flat = dict(item for k, v in args.items() for item in _flatten(f"{ROLLOUT} -> vllm.{k}", v))
        sections["vLLM engine arguments (verl/workers/rollout/vllm_rollout/vllm_async_server.py)"] = flat
    modes = mode_settings(config)
    if modes:
        sections[MODE_TITLE] = modes
    if profile is not None:
        stack = {f"{name}": surface.describe() for name, surface in profile.stack.items()}
        sections["target stack (verl/ascend/env/stack.py)"] = stack
    return sections


MODE_TITLE = "trainer mode, resource pools, weight sync (verl/trainer/ppo/v1/trainer_<mode>.py, verl/checkpoint_engine)"


def mode_settings(config: DictConfig) -> dict[str, Any]:
    """An asynchronous mode's pools, weight-sync engine, bucket and sync frequency, as upstream reads them.

    Empty for ``sync`` (and any other mode): its dry run shows what it always did."""
    from verl_ascend import trainer_mode
    from verl_ascend.checks import rules_async
    from verl_ascend.checks.view import ConfigView

    view = ConfigView(config)
    where = trainer_mode.placement(config)
    mode = where.mode
    if mode not in trainer_mode.ASYNC_MODES:
        return {}
    device = str(view.get("trainer.device", "cuda"))
    nnodes, per_node = view.get_int("trainer.nnodes", 1) or 0, view.get_int("trainer.n_gpus_per_node", 1) or 0
    replica, shape, _ = rules_async.replica_cards(view)
    out: dict[str, Any] = {trainer_mode.KEY: mode}
    train_cards = nnodes * per_node
    out["trainer pool (trainer.nnodes x trainer.n_gpus_per_node)"] = (
        f"{nnodes} x {per_node} = {train_cards} cards, training workers"
        + (f" + {train_cards // replica} colocated rollout replica(s) at {shape}" if where.trainer_rollout else
           " only (actor_rollout_ref.hybrid_engine=false)"))
    step_key = f"trainer.v1.{mode}.parameter_sync_step"
    step = view.get_int(step_key, 1) or 1
    if where.rollout_pool:
        r_nodes, r_per = view.get_int(f"{ROLLOUT}.nnodes", 0) or 0, view.get_int(f"{ROLLOUT}.n_gpus_per_node", 0) or 0
        out[f"rollout pool ({ROLLOUT}.nnodes x {ROLLOUT}.n_gpus_per_node)"] = (
            f"{r_nodes} x {r_per} = {r_nodes * r_per} cards, {(r_nodes * r_per) // replica} standalone replica(s) at "
            f"{shape}")
        out["cards in all"] = train_cards + r_nodes * r_per
        backend = view.get(f"{rules_async.ENGINE}.backend", "naive")
        resolved = rules_async.engine_class_on(str(backend), device)
        module = view.get(f"{rules_async.ENGINE}.custom_backend_module")
        out[f"weight-sync engine ({rules_async.ENGINE}.backend)"] = (
            f"{backend} -> {resolved[0]} ({resolved[1]}) on {device}" if resolved and not module
            else f"{backend} (registered by {module})" if module else f"{backend} (not a name upstream registers)")
        mb = view.get_int(f"{rules_async.ENGINE}.update_weights_bucket_megabytes", 2048)
        out[f"weight-sync bucket ({rules_async.ENGINE}.update_weights_bucket_megabytes)"] = (
            f"{mb} MB (the HCCL and NCCL engines hold two, {2 * mb} MB of device memory per card)")
        train = view.get_int("data.train_batch_size")
        mini = view.get_int(f"{ACTOR}.ppo_mini_batch_size")
        out[f"weight sync frequency ({step_key})"] = (
            f"once per step, after {step} mini-batch update(s) of {mini} prompts (data.train_batch_size {train}); "
            "the colocated replicas get the weights when they switch to rollout")
        out["hybrid rollout switch (trainer.v1.separate_async.hybrid_rollout.enable_switch)"] = view.get_bool(
            rules_async.SWITCH)
    else:
        out["rollout"] = f"colocated on the trainer pool; weights updated in place ({rules_async.ENGINE}.backend " \
                         f"{view.get(f'{rules_async.ENGINE}.backend', 'naive')}) once per step, partial rollout resumed"
    out[f"warm-up (trainer.v1.{mode}.num_warmup_batches)"] = view.get(f"trainer.v1.{mode}.num_warmup_batches", 1)
    out["staleness bound (trainer.v1.sampler.max_off_policy_threshold)"] = view.get(
        "trainer.v1.sampler.max_off_policy_threshold")
    out["rollout correction (algorithm.rollout_correction)"] = _correction(view)
    return out


def _correction(view) -> str:
    """Upstream's off-policy correction in one line: what samples are weighted or rejected by, and the old policy."""
    key = "algorithm.rollout_correction"
    is_level, rs = view.get(f"{key}.rollout_is"), view.get(f"{key}.rollout_rs")
    parts = [f"rollout_is={is_level} (threshold {view.get(f'{key}.rollout_is_threshold')})" if is_level else None,
             f"rollout_rs={rs} (threshold {view.get(f'{key}.rollout_rs_threshold')})" if rs else None]
    old = ("old policy = the rollout log-probs (bypass_mode=true)" if view.get_bool(f"{key}.bypass_mode")
           else "old policy recomputed by the actor (bypass_mode=false)")
    return f"{', '.join(p for p in parts if p) or 'off'}; {old}"


def render(config: DictConfig, profile: Any = None) -> list[str]:
    """The effective settings as ``key: value`` lines (for DRY_RUN); an upstream refusal as a comment."""
    try:
        sections = effective_settings(config, profile)
    except UpstreamConfigError as exc:
        return [f"# not resolved: {exc}", "# (the doctor below refuses the run: upstream_config_rejected)"]
    lines = []
    for title, values in sections.items():
        lines.append(f"# --- {title}")
        for key, value in values.items():
            shown = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
            lines.append(f"{key}: {shown}")
    return lines


REF = "actor_rollout_ref.ref"
# Sections upstream's workers build into config objects, and how (the reference policy is an
# FSDPActorConfig built from the ref section with its log-prob keys renamed, engine_workers.py).
BUILT_SECTIONS = (ACTOR, REF, ROLLOUT)


def _ref_node(config: DictConfig) -> DictConfig:
    """The ref section as ``engine_workers.py`` hands it to ``omega_conf_to_dataclass``."""
    node = OmegaConf.create(OmegaConf.to_container(OmegaConf.select(config, REF), resolve=True))
    OmegaConf.set_struct(node, False)
    node.ppo_mini_batch_size = OmegaConf.select(config, f"{ACTOR}.ppo_mini_batch_size")
    renames = {
        "log_prob_micro_batch_size": "ppo_micro_batch_size",
        "log_prob_micro_batch_size_per_gpu": "ppo_micro_batch_size_per_gpu",
        "log_prob_use_dynamic_bsz": "use_dynamic_bsz",
        "log_prob_max_token_len_per_gpu": "ppo_max_token_len_per_gpu",
    }
    defaults = {"log_prob_use_dynamic_bsz": False}  # engine_workers.py pops this one with False, the rest with None
    for old, new in renames.items():
        node[new] = node.pop(old, defaults.get(old))
    return node


class EffectiveValues:
    """The value of a key where upstream consumes it: read from the config object verl builds for
    its section (after ``__post_init__`` copies, e.g. ``actor.ulysses_sequence_parallel_size`` into
    ``actor.fsdp_config``), else the composed value. What ``DRY_RUN=1`` prints as effective settings."""

    def __init__(self, config: DictConfig):
        self.config = config
        self._built: dict[str, Any] = {}

    def _object(self, section: str):
        if section not in self._built:
            from verl.utils.config import omega_conf_to_dataclass

            try:
                node = _ref_node(self.config) if section == REF else OmegaConf.select(self.config, section)
                self._built[section] = omega_conf_to_dataclass(node)
            except Exception:  # noqa: BLE001 -- an unbuildable section: the composed value stands
                self._built[section] = None
        return self._built[section]

    def get(self, key: str) -> Any:
        composed = OmegaConf.select(self.config, key, default=None, throw_on_resolution_failure=False)
        section = next((s for s in BUILT_SECTIONS if key.startswith(s + ".")), None)
        obj = self._object(section) if section else None
        if obj is None:
            return composed
        for part in key[len(section) + 1 :].split("."):
            try:
                obj = obj[part] if isinstance(obj, Mapping) else getattr(obj, part)
            except (AttributeError, KeyError, TypeError):
                return composed
        return obj
