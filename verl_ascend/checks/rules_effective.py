"""Rules on effective settings: what upstream's own config objects hold, not what a key says.

- ``upstream_config_rejected``: verl's config dataclasses refuse the config (their
  ``__post_init__`` validation, which otherwise fails inside a Ray actor); upstream's message. The
  one place they are built for checking (the entry point's preflight runs this rule too).
- ``key_never_read``: a key set away from its default that the installed verl never reads (the
  list is generated from verl's source by ``scripts/verl_unread_keys.py``). When verl reads the
  same setting elsewhere (``actor.grad_clip`` -> ``actor.optim.clip_grad``) and that consumer
  holds a different effective value (read from the config object verl builds, as ``DRY_RUN=1``
  prints it), the requested switch does not reach its consumer: an error naming both
  (``switch_not_reaching_consumer``); otherwise a warning.
- ``key_read_by_other_engine``: a key set away from its default that only other engines' code reads
  (a rollout knob only the SGLang server reads, on a vLLM run; an engine key only Megatron reads, on
  an FSDP run): a warning naming the engines that read it and the one this run uses.
- ``npu_torch_compile``: on NPU the actor's FSDP engine would torch.compile its entropy helper
  (Inductor/Triton, which Ascend does not run): ``fsdp_config.use_torch_compile`` must be false.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version

from omegaconf import OmegaConf

from verl_ascend.checks.findings import ERROR, INFO, WARN, Finding
from verl_ascend.checks.pipeline import GATE, tag
from verl_ascend.checks.view import ACTOR, ConfigView
from verl_ascend.checks.effective import UpstreamConfigError, build_upstream_configs


def upstream_config_objects(view: ConfigView) -> Iterator[Finding]:
    try:
        build_upstream_configs(view.config)
    except UpstreamConfigError as exc:
        yield Finding("upstream_config_rejected", ERROR, str(exc), (exc.key,))


# A gate of the pipeline (checks that read keys as typed values wait for it), and a launch check.
tag(upstream_config_objects, stage=GATE, launch=True)


def _raw(view: ConfigView, key: str):
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(view.config, parent, default=None, throw_on_resolution_failure=False)
    if node is None or leaf not in node:
        return None, False
    return OmegaConf.to_container(node, resolve=False).get(leaf), True


def _same(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def _legacy(key: str) -> bool:
    from verl_ascend.checks.rules_reward import LEGACY_SECTIONS  # reported by legacy_reward_keys

    return key.split(".", 1)[0] in LEGACY_SECTIONS


def _set_keys(view: ConfigView, listed: dict[str, dict]) -> Iterator[tuple[str, dict]]:
    """The listed keys this config sets away from verl's default, in roles this run builds."""
    for key, entry in listed.items():
        if _legacy(key) or not view.role_runs(key):
            continue
        value, present = _raw(view, key)
        if present and not _same(value, entry["default"]):
            yield key, entry


def keys_never_read(view: ConfigView) -> Iterator[Finding]:
    from verl_ascend.checks.effective import EffectiveValues, unread_list

    listed = unread_list()
    installed = version("verl")
    if listed["verl_version"] != installed:
        yield Finding(
            "unread_keys_stale",
            INFO,
            f"the never-read key list was generated for verl {listed['verl_version']}, verl {installed} is installed; "
            "regenerate it with python scripts/verl_unread_keys.py",
        )
    effective = EffectiveValues(view.config)
    for key, entry in _set_keys(view, listed["unread"]):
        yield _never_read(view, effective, key, entry, installed)
    for key, entry in _set_keys(view, listed.get("engine_only", {})):
        finding = _other_engines_only(effective, key, entry, installed)
        if finding is not None:
            yield finding


def _never_read(view: ConfigView, effective, key: str, entry: dict, installed: str) -> Finding:
    """A key nothing reads; an error when verl reads the same setting elsewhere with another value."""
    consumers = [(c, effective.get(c)) for c in entry.get("read_instead", []) if view.has(c)]
    where = "; ".join(f"verl reads {c} (= {v})" for c, v in consumers)
    if any(not _same(v, view.get(key)) for _c, v in consumers):
        return Finding(
            "switch_not_reaching_consumer",
            ERROR,
            f"{key}={view.get(key)} is never read by verl {installed}, so it does nothing: {where} "
            f"(effective values, as DRY_RUN=1 prints them). Set {consumers[0][0]} instead",
            (key, *[c for c, _ in consumers]),
        )
    hint = f" ({where})" if where else ""
    return Finding("key_never_read", WARN, f"{key}={view.get(key)} is never read by verl {installed}{hint}", (key,))


def _other_engines_only(effective, key: str, entry: dict, installed: str) -> Finding | None:
    """A key read only by engines this run does not select (``read_by``: selector key -> engine values)."""
    used = {selector: effective.get(selector) for selector in entry["read_by"]}
    if any(str(used[selector]) in values for selector, values in entry["read_by"].items()):
        return None
    readers = "; ".join(f"{selector}={'/'.join(values)}" for selector, values in entry["read_by"].items())
    runs = ", ".join(f"{selector}={value}" for selector, value in used.items())
    sites = ", ".join(entry.get("sites", [])[:3])
    return Finding(
        "key_read_by_other_engine",
        WARN,
        f"{key}={effective.get(key)} is read by {readers} only ({sites}, verl {installed}); this run uses {runs}, "
        "so it does nothing here",
        (key, *used),
    )


def npu_torch_compile(view: ConfigView) -> Iterator[Finding]:
    if view.get("trainer.device") != "npu":
        return
    sections = [ACTOR] + (["actor_rollout_ref.ref"] if view.uses_reference_model else [])
    for section in sections:
        key = f"{section}.fsdp_config.use_torch_compile"
        if view.get(f"{section}.strategy") in ("fsdp", "fsdp2") and view.get_bool(key, True):
            yield Finding(
                "npu_torch_compile",
                ERROR,
                f"trainer.device=npu with {key}=true: the FSDP engine compiles its entropy helper with "
                "torch.compile (Inductor/Triton), which Ascend does not run; set it to false",
                (key, "trainer.device"),
            )


RULES = (upstream_config_objects, keys_never_read, npu_torch_compile)
