#!/usr/bin/env python3
"""List the config keys the installed verl defines but never reads (``verl_ascend/checks/upstream_unread_keys.yaml``).

Why: a key set in a config that upstream never reads is a silent no-op (``actor.grad_clip`` while
clipping reads ``actor.optim.clip_grad``; ``actor.use_torch_compile`` while the FSDP engine reads
``actor.fsdp_config.use_torch_compile``). Writing that list by hand would drift with every verl
release, so this script derives it from the installed verl's source:

1. the keys: the top-level scalar keys of each section in ``SECTIONS``, from verl's own
   ``trainer/config/_generated_ppo_trainer.yaml``;
2. the reads: every attribute access ``<receiver>.key``, ``<receiver>.get("key")`` and
   ``<receiver>["key"]`` in verl's Python source. A read is credited to a section by the last
   section word in the receiver (``self.engine_config`` -> engine, ``self.config.actor.optim`` ->
   optim), else by the path of the file (``workers/actor/dp_actor.py``: ``self.config`` -> actor),
   else to every section (``config.clip_ratio`` in ``trainer/ppo/core_algos.py``);
   ``self.key`` inside a section's config dataclass (its ``__post_init__``) counts for that section;
3. interpolations: a key that another key's default refers to (``fsdp_config.entropy_checkpointing:
   ${oc.select:actor_rollout_ref.actor.entropy_checkpointing,False}``) is read when that key is
   read (transitively), so ``actor.entropy_checkpointing`` counts as read, while
   ``actor.use_torch_compile`` (referred to only by the unread ``ref.use_torch_compile``; the
   engine's own default is a literal ``true``) does not;
4. for each unread key, the read keys of the same section tree with the same name or the same
   words (``grad_clip`` ~ ``clip_grad``): where the setting is actually consumed.

The analysis is by name, so it errs towards "read" (a key is only listed when no access anywhere
can be credited to its section). Refresh after changing the pinned verl::

    python scripts/verl_unread_keys.py            # rewrites verl_ascend/checks/upstream_unread_keys.yaml
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from importlib.metadata import version
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "verl_ascend" / "checks" / "upstream_unread_keys.yaml"
# section path -> (words that name it in receivers/paths, its config dataclasses)
SECTIONS = {
    "actor_rollout_ref.actor": (("actor", "policy"), ("ActorConfig", "FSDPActorConfig")),
    "actor_rollout_ref.rollout": (("rollout",), ("RolloutConfig",)),
    "actor_rollout_ref.actor.fsdp_config": (("engine", "fsdp"), ("FSDPEngineConfig", "EngineConfig")),
    "actor_rollout_ref.actor.optim": (("optim", "optimizer"), ("OptimizerConfig", "FSDPOptimizerConfig")),
    "critic": (("critic",), ("CriticConfig", "FSDPCriticConfig")),
    "actor_rollout_ref.ref": (("ref",), ("RefConfig",)),
    "actor_rollout_ref.model": (("model",), ("HFModelConfig",)),
}
WORD_TO_SECTION = {word: section for section, (words, _) in SECTIONS.items() for word in words}
SKIP_TOKENS = {"actor_rollout_ref"}


def section_keys(generated: dict) -> dict[str, dict[str, object]]:
    """section -> {key: default} for its top-level scalar keys."""
    out = {}
    for section in SECTIONS:
        node = generated
        for part in section.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        out[section] = {k: v for k, v in node.items() if not isinstance(v, (dict, list)) and not k.startswith("_")}
    return out


def _last_section_word(text: str) -> str | None:
    found = None
    for token in re.split(r"[^A-Za-z0-9_]+", text):
        if token in SKIP_TOKENS:
            continue
        for part in token.split("_"):
            if part.lower() in WORD_TO_SECTION:
                found = WORD_TO_SECTION[part.lower()]
    return found


class _Reads(ast.NodeVisitor):
    """Collect (name, credited section) for every key-like access in one module."""

    def __init__(self, rel_path: str, names: set[str]):
        self.path_section = _last_section_word(rel_path.replace("/", " ").replace(".py", ""))
        self.names = names
        self.classes: list[str] = []
        self.reads: set[tuple[str, str]] = set()
        self.modules: set[str] = set()  # names bound by imports: `verl_F.entropy_from_logits...` is a function

    def visit_Import(self, node):
        self.modules |= {alias.asname or alias.name.split(".")[0] for alias in node.names}

    def visit_ImportFrom(self, node):
        self.modules |= {alias.asname or alias.name for alias in node.names}

    def visit_ClassDef(self, node):
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _credit(self, name: str, receiver: ast.AST) -> None:
        if name not in self.names:
            return
        text = ast.unparse(receiver)
        if text in self.modules:
            return
        if text == "self":
            owner = self.classes[-1] if self.classes else ""
            for section, (_, classes) in SECTIONS.items():
                if owner in classes:
                    self.reads.add((name, section))
            return
        section = _last_section_word(text) or self.path_section
        for credited in [section] if section else SECTIONS:  # unknown receiver: credit every section
            self.reads.add((name, credited))

    def visit_Attribute(self, node):
        if isinstance(node.ctx, ast.Load):
            self._credit(node.attr, node.value)
        self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self._credit(arg.value, f.value)
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            self._credit(node.slice.value, node.value)
        self.generic_visit(node)


def collect_reads(verl_root: Path, names: set[str]) -> set[tuple[str, str]]:
    reads: set[tuple[str, str]] = set()
    for path in sorted(verl_root.rglob("*.py")):
        rel = path.relative_to(verl_root).as_posix()
        if rel.startswith(("ascend/", "cpu/")):  # verl-ascend's own code is not upstream's reader
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        visitor = _Reads(rel, names)
        visitor.visit(tree)
        reads |= visitor.reads
    return reads


ABSOLUTE_REF = re.compile(r"(?<![\w.])((?:actor_rollout_ref|critic)\.[A-Za-z_][\w.]*)")
RELATIVE_REF = re.compile(r"[{:]\.([A-Za-z_]\w*)")


def references(node, path: str = "") -> dict[str, set[str]]:
    """referred key -> keys whose default interpolates it, over the whole generated config."""
    refs: dict[str, set[str]] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            for target, sources in references(value, f"{path}.{key}" if path else str(key)).items():
                refs.setdefault(target, set()).update(sources)
    elif isinstance(node, str) and "${" in node:
        parent = path.rsplit(".", 1)[0]
        targets = set(ABSOLUTE_REF.findall(node)) | {f"{parent}.{k}" for k in RELATIVE_REF.findall(node)}
        for target in targets:
            refs.setdefault(target, set()).add(path)
    return refs


def _transitively_read(direct: set[str], refs: dict[str, set[str]]) -> set[str]:
    """Keys read directly, or referred to by the default of a key that is read (fixpoint)."""
    read = set(direct)
    changed = True
    while changed:
        changed = False
        for target, sources in refs.items():
            if target not in read and sources & read:
                read.add(target)
                changed = True
    return read


def _words(name: str) -> frozenset[str]:
    return frozenset(name.split("_"))


def unread_keys(verl_root: Path) -> dict[str, dict]:
    generated = yaml.safe_load((verl_root / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())
    keys = section_keys(generated)
    names = {k for section in keys.values() for k in section}
    reads = collect_reads(verl_root, names)
    direct = {f"{section}.{key}" for key, section in reads}
    all_keys = {f"{section}.{key}" for section, entries in keys.items() for key in entries}
    # keys outside SECTIONS (data.*, trainer.*, ...) are not analysed: count them as read
    outside = {target for sources in references(generated).values() for target in sources} - all_keys
    read = _transitively_read(direct | outside, references(generated))
    result = {}
    for section, entries in keys.items():
        for key, default in entries.items():
            if f"{section}.{key}" in read:
                continue
            instead = sorted(
                f"{other}.{name}"
                for other, other_entries in keys.items()
                if other != section and other.startswith(section.rsplit(".", 1)[0])
                for name in other_entries
                if (name, other) in reads and (name == key or _words(name) == _words(key))
            )
            result[f"{section}.{key}"] = {"default": default, "read_instead": instead}
    return dict(sorted(result.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    import verl

    root = Path(verl.__file__).parent
    data = {
        "verl_version": version("verl"),
        "generated_by": "scripts/verl_unread_keys.py",
        "unread": unread_keys(root),
    }
    args.out.write_text(yaml.safe_dump(data, sort_keys=False))
    print(f"{args.out}: {len(data['unread'])} keys verl {data['verl_version']} never reads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
