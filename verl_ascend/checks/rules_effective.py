"""Rules on effective settings: what upstream's own config objects hold, not what a key says.

- ``upstream_config_rejected``: verl's config dataclasses refuse the config (their
  ``__post_init__`` validation, which otherwise fails inside a Ray actor); upstream's message. The
  one place they are built for checking (the entry point's preflight runs this rule too).
- ``switch_not_reaching_consumer``: a key verl declares but never reads, whose setting verl reads
  under another key (``actor.grad_clip`` -> ``actor.optim.clip_grad``; :data:`MOVED_SWITCHES`, checked by
  hand), set to a value that consumer does not hold (read from the config object verl builds, as
  ``DRY_RUN=1`` prints it): an error naming both.
- ``npu_torch_compile``: on NPU the actor's FSDP engine would torch.compile its entropy helper
  (Inductor/Triton, which Ascend does not run): ``fsdp_config.use_torch_compile`` must be false.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version

from omegaconf import OmegaConf

from verl_ascend.checks.findings import ERROR, Finding
from verl_ascend.checks.pipeline import GATE, tag
from verl_ascend.checks.view import ACTOR, REF, ConfigView
from verl_ascend.checks.effective import UpstreamConfigError, build_upstream_configs


def upstream_config_objects(view: ConfigView) -> Iterator[Finding]:
    try:
        build_upstream_configs(view.config)
    except UpstreamConfigError as exc:
        yield Finding("upstream_config_rejected", ERROR, str(exc), (exc.key,))


# A gate of the pipeline (checks that read keys as typed values wait for it), and a launch check.
tag(upstream_config_objects, stage=GATE, launch=True)


# A key verl 0.9.1 declares but never reads -> (its default in verl's YAML, the keys verl reads for that
# setting instead). Checked by hand against verl's source: nothing reads the left-hand key; the right-hand keys
# reach the optimiser or the engine. (A list generated from the whole schema was dropped: on random samples
# it was wrong about half the time.)
_ENGINES = ("fsdp_config", "torchtitan", "veomni")  # each engine's transformer_impl.py reads its use_torch_compile
MOVED_SWITCHES = {
    f"{ACTOR}.grad_clip": (1.0, (f"{ACTOR}.optim.clip_grad",)),  # ActorConfig declares it; the optimiser clips
    f"{ACTOR}.use_torch_compile": (True, tuple(f"{ACTOR}.{e}.use_torch_compile" for e in _ENGINES)),
    f"{REF}.use_torch_compile": (
        f"${{oc.select:{ACTOR}.use_torch_compile,true}}", tuple(f"{REF}.{e}.use_torch_compile" for e in _ENGINES)),
}


def _raw(view: ConfigView, key: str):
    """The key's value as written (interpolations unresolved), and whether the config has it."""
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


def switches_not_reaching_consumer(view: ConfigView) -> Iterator[Finding]:
    """A moved switch set away from its default, to a value its consumer does not hold: it does nothing."""
    from verl_ascend.checks.effective import EffectiveValues

    effective = None
    for key, (default, readers) in MOVED_SWITCHES.items():
        value, present = _raw(view, key)
        if not present or _same(value, default) or not view.role_runs(key):
            continue
        effective = effective or EffectiveValues(view.config)
        consumers = [(c, effective.get(c)) for c in readers if view.has(c)]
        if any(not _same(v, view.get(key)) for _c, v in consumers):
            where = "; ".join(f"verl reads {c} (= {v})" for c, v in consumers)
            yield Finding(
                "switch_not_reaching_consumer",
                ERROR,
                f"{key}={view.get(key)} is never read by verl {version('verl')}, so it does nothing: {where} "
                f"(effective values, as DRY_RUN=1 prints them). Set {consumers[0][0]} instead",
                (key, *[c for c, _ in consumers]),
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


RULES = (upstream_config_objects, switches_not_reaching_consumer, npu_torch_compile)
