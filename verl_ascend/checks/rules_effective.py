"""Rules on effective settings: what upstream's own config objects hold, not what a key says.

- ``upstream_config_rejected``: verl's config dataclasses refuse the config (their
  ``__post_init__`` validation, which otherwise fails inside a Ray actor); upstream's message. The
  one place they are built for checking (the entry point's preflight runs this rule too).
- ``key_never_read``: a key set away from its default that the installed verl never reads (the
  list is generated from verl's source by ``scripts/verl_unread_keys.py``). When verl reads the
  same setting elsewhere (``actor.grad_clip`` -> ``actor.optim.clip_grad``) and that consumer
  holds a different value, the requested switch does not reach its consumer: an error naming
  both; otherwise a warning.
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
from verl_ascend.checks.effective import UpstreamConfigError, build_upstream_configs, unread_keys


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


def keys_never_read(view: ConfigView) -> Iterator[Finding]:
    from verl_ascend.checks.effective import UNREAD_KEYS_PATH

    listed = unread_keys()
    installed = version("verl")
    import yaml

    recorded = yaml.safe_load(UNREAD_KEYS_PATH.read_text())["verl_version"]
    if recorded != installed:
        yield Finding(
            "unread_keys_stale",
            INFO,
            f"the never-read key list was generated for verl {recorded}, verl {installed} is installed; "
            "regenerate it with python scripts/verl_unread_keys.py",
        )
    for key, entry in listed.items():
        value, present = _raw(view, key)
        if not present or _same(value, entry["default"]):
            continue
        consumers = [(c, view.get(c)) for c in entry.get("read_instead", []) if view.has(c)]
        where = "; ".join(f"verl reads {c} (= {v})" for c, v in consumers)
        if any(not _same(v, view.get(key)) for _c, v in consumers):
            yield Finding(
                "switch_not_reaching_consumer",
                ERROR,
                f"{key}={view.get(key)} is never read by verl {installed}, so it does nothing: {where}. "
                f"Set {consumers[0][0]} instead",
                (key, *[c for c, _ in consumers]),
            )
        else:
            hint = f" ({where})" if where else ""
            yield Finding("key_never_read", WARN, f"{key}={view.get(key)} is never read by verl {installed}{hint}", (key,))


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
