"""Schema rule: a key inside upstream's config sections that upstream 0.9.1 does not define.

Command-line overrides of unknown keys already fail (Hydra's struct mode), but keys that arrive
through YAML files (``defaults`` merges) or ``+key=value`` compose silently and are then read by
nothing: a misspelled ``fsdp_sise: 128`` costs a run at the default. The reference is the flattened
config upstream ships next to its Hydra files (``verl/trainer/config/_generated_*.yaml``, generated
from the same sources); a test compares it with a fresh composition so drift is caught.

Free-form places are not checked: mappings that are empty in the reference (``override_config``,
``engine_kwargs.vllm``, ...), the ``ray.init`` keyword arguments, the dapo manager's
``reward.reward_kwargs`` (checked by the reward rules), per-mode sections under ``trainer.v1``
(read as ``trainer.v1.<mode>``), and new top-level sections (this project's ``ascend``,
interpolation helpers) which upstream code never looks at. A section the reference builds into a config
dataclass (its ``_target_``) also accepts that dataclass's fields: upstream constructs the section
into it, so a field its YAML omits (``RolloutConfig.enable_sleep_mode``, read by the vLLM server) is a
key all the same. Upstream also reads a few optional keys
with ``.get()`` that its YAML does not declare; those are listed in OPTIONAL_KEYS. Because such
reads can exist in code the doctor does not know (a custom trainer or reward function), an unknown
key is a warning, not an error: ``--strict`` refuses it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from verl_ascend.checks.findings import WARN, Finding
from verl_ascend.checks.view import ACTOR, ConfigView

REFERENCE_BY_STRATEGY = {
    "megatron": "_generated_ppo_megatron_trainer.yaml",
    "veomni": "_generated_ppo_veomni_trainer.yaml",
    "torchtitan": "_generated_ppo_torchtitan_trainer.yaml",
}
DEFAULT_REFERENCE = "_generated_ppo_trainer.yaml"
FREE_FORM = ("reward.reward_kwargs", "ray_kwargs.ray_init", "reward.custom_reward_function.reward_kwargs")
# Keys upstream 0.9.1 reads with config.get(...) although its YAML does not declare them.
OPTIONAL_KEYS = (
    "reward.timeout",
    "trainer.remove_previous_ckpt_in_save",
    "algorithm.gdpo_reward_keys",
    "actor_rollout_ref.rollout.checkpoint_manager_class",
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class",
    "actor_rollout_ref.model.task_type",
    "actor_rollout_ref.model.lora.fully_sharded_loras",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision",
    # Read by this project's data check (verl_ascend/checks/data_check.py), not by upstream.
    "data.skip_bad_rows",
)
# Sections whose unknown *mapping* children are per-mode settings (trainer.v1.<mode>).
MODE_SECTIONS = ("trainer.v1",)


@functools.lru_cache(maxsize=4)
def upstream_reference(strategy: str = "fsdp") -> dict:
    """Upstream 0.9.1's full config tree for ``strategy``, as plain data (keys are what matters)."""
    import verl.trainer.config as upstream_config

    folder = Path(upstream_config.__file__).parent
    name = REFERENCE_BY_STRATEGY.get(strategy, DEFAULT_REFERENCE)
    return yaml.safe_load((folder / name).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=128)
def dataclass_fields(target: str) -> frozenset[str]:
    """Field names of the config dataclass ``target`` (a reference section's ``_target_``); empty if none."""
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError):
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else frozenset()


def unknown_keys(config: Any, reference: dict) -> list[tuple[str, list[str]]]:
    """(dotted key, close matches) for every key under a reference section that the reference lacks."""
    tree = OmegaConf.to_container(config, resolve=False) if not isinstance(config, dict) else config
    found: list[tuple[str, list[str]]] = []
    for section, node in tree.items():
        if section in reference and isinstance(node, dict) and isinstance(reference[section], dict):
            _walk(node, reference[section], str(section), found)
    return found


def _walk(node: dict, ref: dict, path: str, found: list) -> None:
    if path in FREE_FORM or not ref:
        return
    fields = dataclass_fields(str(ref.get("_target_", "")))
    for key, value in node.items():
        dotted = f"{path}.{key}"
        if key not in ref and key not in fields:
            per_mode = path in MODE_SECTIONS and isinstance(value, dict)
            if dotted not in FREE_FORM and dotted not in OPTIONAL_KEYS and not per_mode:
                found.append((dotted, difflib.get_close_matches(str(key), [str(k) for k in ref], n=2, cutoff=0.6)))
        elif key in ref and isinstance(value, dict) and isinstance(ref[key], dict):
            _walk(value, ref[key], dotted, found)


def schema_keys(view: ConfigView) -> Iterator[Finding]:
    strategy = view.get(f"{ACTOR}.strategy", "fsdp")
    for key, matches in unknown_keys(view.config, upstream_reference(str(strategy))):
        hint = f" Did you mean {' or '.join(key.rsplit('.', 1)[0] + '.' + m for m in matches)}?" if matches else ""
        yield Finding(
            "unknown_key",
            WARN,
            f"{key} is not a key of upstream verl 0.9.1's config (actor strategy {strategy}): unless your own code "
            f"reads it, the setting silently does not apply.{hint}",
            (key,),
        )


RULES = (schema_keys,)
