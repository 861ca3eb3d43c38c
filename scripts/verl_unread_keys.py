#!/usr/bin/env python3
"""Which config keys the installed verl reads, and by which engine (``verl_ascend/checks/upstream_unread_keys.yaml``).

Why: a key set in a config that upstream never reads is a silent no-op (``actor.grad_clip`` while
clipping reads ``actor.optim.clip_grad``), and so is a key read only by an engine the run does not
use (a rollout knob only the SGLang server reads, on a vLLM run). Writing that list by hand would
drift with every verl release, so this script derives it from the installed verl:

1. the keys: every leaf of every section, nested ones included, of verl's composed trainer
   configs (``trainer/config/_generated_ppo{,_megatron,_veomni,_torchtitan}_trainer.yaml``: the
   same sections with each training engine's sub-config); each section's config dataclass comes
   from its ``_target_``;
2. the reads, in verl's Python source: ``<receiver>.key``, ``getattr``/``hasattr(<receiver>,
   "key")``, ``<receiver>.get/pop/setdefault("key")``, ``"key" in <receiver>``,
   ``<receiver>["key"]``, and a full dotted key as a string (``OmegaConf.select(config,
   "actor_rollout_ref.rollout.n")``). A read is credited to the sections the receiver names (its
   last section word: ``self.engine_config`` -> the engine sub-configs, ``config.critic.checkpoint``
   -> ``critic.checkpoint``), else to those the file's path names, else -- or when none of those has
   the key -- to every section that has it. ``self.key`` inside a section's config dataclass or one
   of its bases (its ``__post_init__`` copies, properties, validation) counts for every section
   built from it: the reference policy is an ``FSDPActorConfig`` like the actor, so its
   ``ulysses_sequence_parallel_size``, copied into its engine config, is read;
3. the consumer: a read in an engine's own code (``workers/rollout/sglang_rollout/``,
   ``workers/engine/megatron/``, ...) counts only for runs that select that engine (``rollout.name``,
   the role's ``strategy``); anywhere else it counts for every run;
4. interpolations: a key that another key's default refers to (``fsdp_config.entropy_checkpointing:
   ${oc.select:actor_rollout_ref.actor.entropy_checkpointing,False}``) is read wherever that key is
   read (transitively);
5. for each key read by nothing, the read keys of the same role with the same name or the same
   words (``grad_clip`` ~ ``clip_grad``): where the setting is actually consumed.

The analysis goes by names, so it errs towards "read". Its precision is measured against keys
checked by hand in the source (``tests/verl_ascend/checks/fixtures/unread_keys_hand_checked.yaml``).
Refresh after changing the pinned verl::

    python scripts/verl_unread_keys.py            # rewrites verl_ascend/checks/upstream_unread_keys.yaml
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "verl_ascend" / "checks" / "upstream_unread_keys.yaml"
CONFIG_FILES = (
    "_generated_ppo_trainer.yaml",
    "_generated_ppo_megatron_trainer.yaml",
    "_generated_ppo_veomni_trainer.yaml",
    "_generated_ppo_torchtitan_trainer.yaml",
)
# Other words code uses for a section (``self.engine_config`` is a role's engine sub-config).
ALIASES = {
    "engine": ("fsdp_config", "fsdp", "megatron", "veomni", "torchtitan"),
    "fsdp": ("fsdp_config",),
    "optimizer": ("optim",),
    "policy": ("actor",),
    "rm": ("reward_model",),
    "sampling": ("val_kwargs",),
}
SUFFIXES = ("_configs", "_config", "_cfg", "_conf")
# An engine's own code: (path prefix, axis, engine). Axis "rollout" is selected by a rollout
# section's ``name``, axis "train" by a role's ``strategy``.
ENGINE_PATHS = (
    ("workers/rollout/vllm_rollout/", "rollout", "vllm"),
    ("workers/rollout/sglang_rollout/", "rollout", "sglang"),
    ("workers/rollout/trtllm_rollout/", "rollout", "trtllm"),
    ("workers/rollout/hf_rollout.py", "rollout", "hf"),
    ("workers/rollout/naive/", "rollout", "naive"),
    ("workers/engine/fsdp/", "train", "fsdp"),
    ("workers/engine/megatron/", "train", "megatron"),
    ("workers/engine/mindspeed/", "train", "megatron"),
    ("workers/engine/veomni/", "train", "veomni"),
    ("workers/engine/torchtitan/", "train", "torchtitan"),
    ("workers/engine/automodel/", "train", "automodel"),
    ("utils/megatron", "train", "megatron"),
    ("models/mcore/", "train", "megatron"),
)
# The config values that select each engine.
ENGINE_VALUES = {"fsdp": ["fsdp", "fsdp2", "fsdp_turbo"]}
# Which key selects the engine of an axis for a key under a prefix (first match wins).
SELECTORS = {
    "rollout": (("reward.reward_model.rollout.", "reward.reward_model.rollout.name"), ("", "actor_rollout_ref.rollout.name")),
    "train": (
        ("critic.", "critic.strategy"),
        ("actor_rollout_ref.ref.", "actor_rollout_ref.ref.strategy"),
        ("", "actor_rollout_ref.actor.strategy"),
    ),
}
SKIP_DIRS = ("ascend/", "cpu/")  # verl-ascend's own code is not upstream's reader
COMMON = None  # the consumer tag of a read outside any engine's code


# --------------------------------------------------------------------------- the keys


@dataclass
class KeyTree:
    defaults: dict[str, object] = field(default_factory=dict)  # leaf key -> default (first file that has it)
    sections: dict[str, set[str]] = field(default_factory=dict)  # section path -> names of its children
    targets: dict[str, set[str]] = field(default_factory=dict)  # section path -> its dataclasses' names

    def add(self, node: dict, path: str = "") -> None:
        self.sections.setdefault(path, set())
        for key, value in node.items():
            if key == "_target_":
                self.targets.setdefault(path, set()).add(str(value).rsplit(".", 1)[-1])
                continue
            child = f"{path}.{key}" if path else str(key)
            self.sections[path].add(str(key))
            if isinstance(value, dict) and value:
                self.add(value, child)
            else:
                self.defaults.setdefault(child, value)

    def plain_dict(self, section: str) -> bool:
        """A section with no config dataclass in or below it: verl hands it on whole."""
        return section in self.sections and not any(
            t for path, t in self.targets.items() if t and (path == section or path.startswith(section + "."))
        )

    def free_form(self, section: str) -> bool:
        """A plain dict field of a config dataclass (``fsdp_config.wrap_policy``)."""
        return bool(self.targets.get(section.rpartition(".")[0])) and self.plain_dict(section)

    def leaves_under(self, section: str) -> list[str]:
        return [key for key in self.defaults if key.startswith(section + ".")]

    def by_name(self) -> dict[str, list[str]]:
        """Section name (its last path part) -> the section paths with that name."""
        out: dict[str, list[str]] = {}
        for path in self.sections:
            if path:
                out.setdefault(path.rsplit(".", 1)[-1], []).append(path)
        return out


def load_keys(verl_root: Path) -> KeyTree:
    tree = KeyTree()
    for name in CONFIG_FILES:
        path = verl_root / "trainer" / "config" / name
        if path.is_file():
            tree.add(yaml.safe_load(path.read_text()))
    return tree


# --------------------------------------------------------------------------- the reads


def engine_of(rel_path: str) -> tuple[str, str] | None:
    for prefix, axis, engine in ENGINE_PATHS:
        if rel_path.startswith(prefix):
            return axis, engine
    return COMMON


def class_bases(verl_root: Path) -> dict[str, set[str]]:
    """Class name -> its ancestors' names (and itself), over verl's source."""
    direct: dict[str, set[str]] = {}
    for tree in _modules(verl_root).values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                direct.setdefault(node.name, set()).update(n for n in names if n)
    out = {}
    for name in direct:
        seen, todo = {name}, [name]
        while todo:
            for base in direct.get(todo.pop(), ()):
                if base not in seen:
                    seen.add(base)
                    todo.append(base)
        out[name] = seen
    return out


_MODULE_CACHE: dict[Path, dict[str, ast.Module]] = {}


def _modules(verl_root: Path) -> dict[str, ast.Module]:
    if verl_root not in _MODULE_CACHE:
        modules = {}
        for path in sorted(verl_root.rglob("*.py")):
            rel = path.relative_to(verl_root).as_posix()
            if rel.startswith(SKIP_DIRS):
                continue
            try:
                modules[rel] = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
        _MODULE_CACHE[verl_root] = modules
    return _MODULE_CACHE[verl_root]


class Resolver:
    """Which sections a receiver expression (``self.config.actor.checkpoint``) names."""

    def __init__(self, keys: KeyTree):
        self.keys = keys
        self.named = keys.by_name()

    def _sections_for_token(self, token: str, parts: bool = True) -> list[str]:
        for word in dict.fromkeys([token, *(token[: -len(s)] for s in SUFFIXES if token.endswith(s))]):
            if not word:
                continue
            found = [p for name in (word, *ALIASES.get(word, ())) for p in self.named.get(name, ())]
            if found:
                return found
        for part in reversed(token.split("_") if parts else ()):  # rollout_worker -> rollout
            found = [p for name in (part, *ALIASES.get(part, ())) for p in self.named.get(name, ())]
            if part and found:
                return found
        return []

    def sections(self, text: str, strict: bool = False) -> list[str]:
        """``strict``: only the last token, by its whole name (what ``asdict(x)`` or ``**x`` consumes)."""
        tokens = [t for t in re.split(r"[^A-Za-z0-9_]+", text) if t]
        for i in range(len(tokens) - 1, -1 if not strict else max(len(tokens) - 2, -1), -1):
            found = self._sections_for_token(tokens[i], parts=not strict)
            if found:
                earlier = {p for t in tokens[:i] for p in self._sections_for_token(t)}
                narrowed = [p for p in found if any(p.startswith(e + ".") for e in earlier)]
                return narrowed or found
        return []


@dataclass
class Reads:
    """Key -> consumer tag (None: every run; (axis, engine): that engine's runs only) -> first site."""

    sites: dict[str, dict] = field(default_factory=dict)

    def add(self, key: str, tag, site: str) -> None:
        self.sites.setdefault(key, {}).setdefault(tag, site)


class _Visitor(ast.NodeVisitor):
    def __init__(self, rel: str, tree, keys: KeyTree, resolver: Resolver, bases: dict[str, set[str]], reads: Reads):
        self.rel, self.keys, self.resolver, self.bases, self.reads = rel, keys, resolver, bases, reads
        self.tag = engine_of(rel)
        self.path_sections = resolver.sections(rel.removesuffix(".py").replace("/", " "))
        self.classes: list[str] = []
        self.modules: set[str] = set()
        self.packages: set[str] = set()  # names bound by ``import x [as y]``: another library's functions
        self.names = {name for children in keys.sections.values() for name in children}
        targets = {t for ts in keys.targets.values() for t in ts}
        self.defines_config = any(isinstance(n, ast.ClassDef) and n.name in targets for n in ast.walk(tree))

    def visit_Import(self, node):
        names = {alias.asname or alias.name.split(".")[0] for alias in node.names}
        self.modules |= names
        self.packages |= names

    def visit_ImportFrom(self, node):
        self.modules |= {alias.asname or alias.name for alias in node.names}

    def visit_ClassDef(self, node):
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _record(self, sections, name: str, node) -> None:
        site = f"{self.rel}:{node.lineno}"
        for section in sections:
            self.reads.add(f"{section}.{name}" if section else name, self.tag, site)

    def _credit(self, name: str, receiver: ast.AST, node) -> None:
        if name not in self.names:
            return
        text = ast.unparse(receiver)
        if text in self.modules:
            return
        having = [s for s, children in self.keys.sections.items() if name in children]
        if text == "self":  # inside a config dataclass: every section built from it or a subclass
            owner = self.classes[-1] if self.classes else ""
            built = [s for s in having if any(owner in self.bases.get(t, {t}) for t in self.keys.targets.get(s, ()))]
            self._record(built, name, node)
            return
        named = self.resolver.sections(text, strict=True)
        # ``self.config.rollout`` in reward_loop/reward_model.py: the reward model's rollout section
        named = [n for n in named if any(n.startswith(p + ".") for p in self.path_sections)] or named
        if named:  # the receiver names its section: a key neither it nor a sub-section has is another object's
            inside = [s for s in having if any(s == n or s.startswith(n + ".") for n in named)]
            self._record(inside, name, node)
            return
        candidates = self.resolver.sections(text) or self.path_sections
        chosen = [s for s in candidates if s in having]
        self._record(chosen or having, name, node)

    def _credit_whole(self, expr: ast.AST, node, free_form_only: bool = False) -> None:
        """``expr`` consumed as a whole (``asdict(cfg)``, ``**cfg``, a plain dict passed on): its leaves are read.

        Only a config's attribute (``self.engine_config``) or a name that says it is one (``optim_cfg``)."""
        if not (isinstance(expr, ast.Attribute) or (isinstance(expr, ast.Name) and expr.id.endswith(SUFFIXES))):
            return
        for section in self.resolver.sections(ast.unparse(expr), strict=True):
            if not free_form_only or self.keys.free_form(section):
                self._read_under(section, node)

    def _read_under(self, section: str, node) -> None:
        for key in self.keys.leaves_under(section):
            self.reads.add(key, self.tag, f"{self.rel}:{node.lineno}")

    def _credit_plain_dict(self, name: str, receiver: ast.AST, node) -> None:
        """``config.ray_kwargs.get("ray_init")``: a section with no dataclass in it, fetched to be handed on whole."""
        for parent in self.resolver.sections(ast.unparse(receiver), strict=True):
            if self.keys.plain_dict(f"{parent}.{name}"):
                self._read_under(f"{parent}.{name}", node)

    def visit_Attribute(self, node):
        if isinstance(node.ctx, ast.Load):
            self._credit(node.attr, node.value, node)
            if node.attr in self.resolver.named and not isinstance(getattr(node, "parent", None), (ast.Attribute, ast.Subscript)):
                self._credit_whole(node, node, free_form_only=True)
        self.generic_visit(node)

    def visit_keyword(self, node):
        if node.arg is None:  # f(**cfg)
            self._credit_whole(node.value, node.value)
        self.generic_visit(node)

    def _name_list(self, node) -> None:
        """A literal list of field names (``("muon_momentum", "muon_nesterov", ...)``, then ``getattr`` in a loop)."""
        names = [e.value for e in node.elts if _is_str(e)]
        if self.defines_config:  # a config module's own lists (``_mutable_fields``) name, they do not read
            return
        if len(names) >= 2 and len(names) == len(node.elts):
            for name in names:
                if name in self.names:
                    having = [s for s, children in self.keys.sections.items() if name in children]
                    chosen = [s for s in self.path_sections if s in having]
                    self._record(chosen or having, name, node)

    def visit_Tuple(self, node):
        self._name_list(node)
        self.generic_visit(node)

    visit_List = visit_Set = visit_Tuple

    def visit_Call(self, node):
        f = node.func
        key = node.args[1] if len(node.args) > 1 else None
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if fname in WHOLE_READS and node.args:
            self._credit_whole(node.args[0], node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in self.packages:
            for arg in node.args:  # tq.init(config.transfer_queue): a plain section handed to another library
                if isinstance(arg, ast.Attribute) and re.search(r"conf|cfg", ast.unparse(arg.value)):
                    for section in self.resolver.sections(ast.unparse(arg), strict=True):
                        if self.keys.plain_dict(section):
                            self._read_under(section, node)
        if isinstance(f, ast.Name) and f.id in ("getattr", "hasattr") and _is_str(key):
            self._credit(key.value, node.args[0], node)
        elif isinstance(f, ast.Name) and ("get" in f.id or "attr" in f.id) and node.args and _is_str(node.args[0]):
            self._credit(node.args[0].value, ast.Name(id=""), node)  # a local getattr helper: _get_attr("key", 0)
        elif isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and node.args and _is_str(node.args[0]):
            self._credit(node.args[0].value, f.value, node)
            self._credit_plain_dict(node.args[0].value, f.value, node)
        self.generic_visit(node)

    def visit_Compare(self, node):
        if _is_str(node.left) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            self._credit(node.left.value, node.comparators[0], node)
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if _is_str(node.slice):
            self._credit(node.slice.value, node.value, node)
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and "." in node.value and node.value in self.keys.defaults:
            self.reads.add(node.value, self.tag, f"{self.rel}:{node.lineno}")


WHOLE_READS = ("asdict", "fields", "vars")


def _is_str(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def collect_reads(verl_root: Path, keys: KeyTree) -> Reads:
    reads = Reads()
    resolver = Resolver(keys)
    bases = class_bases(verl_root)
    for rel, tree in _modules(verl_root).items():
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                child.parent = parent
        _Visitor(rel, tree, keys, resolver, bases, reads).visit(tree)
    return reads


# --------------------------------------------------------------------------- interpolations

ABSOLUTE_REF = re.compile(r"(?<![\w.])((?:actor_rollout_ref|critic|data|trainer|algorithm|reward|distillation)\.[A-Za-z_][\w.]*)")
RELATIVE_REF = re.compile(r"[{:,](\.+)([A-Za-z_][\w.]*)")


def references(keys: KeyTree) -> dict[str, set[str]]:
    """Referred key -> the keys whose default interpolates it."""
    refs: dict[str, set[str]] = {}
    for key, default in keys.defaults.items():
        if not (isinstance(default, str) and "${" in default):
            continue
        parts = key.split(".")
        targets = set(ABSOLUTE_REF.findall(default))
        for dots, rest in RELATIVE_REF.findall(default):
            base = parts[: len(parts) - len(dots)]
            targets.add(".".join([*base, rest]))
        for target in targets:
            refs.setdefault(target, set()).add(key)
    return refs


def propagate(reads: Reads, refs: dict[str, set[str]]) -> None:
    """A key referred to by a read key's default is read by the same consumers (fixpoint)."""
    changed = True
    while changed:
        changed = False
        for target, sources in refs.items():
            for source in sources:
                for tag, site in list(reads.sites.get(source, {}).items()):
                    if tag not in reads.sites.get(target, {}):
                        reads.add(target, tag, f"via {source} ({site})")
                        changed = True


# --------------------------------------------------------------------------- the result


def selector(key: str, axis: str) -> str:
    return next(sel for prefix, sel in SELECTORS[axis] if key.startswith(prefix))


def consumers(key: str, tags: dict) -> dict[str, list[str]] | None:
    """None when every run reads the key; else selector key -> the values whose engine reads it."""
    if COMMON in tags:
        return None
    out: dict[str, list[str]] = {}
    for axis, engine in sorted(tags):
        out.setdefault(selector(key, axis), []).extend(ENGINE_VALUES.get(engine, [engine]))
    return {k: sorted(set(v)) for k, v in out.items()}


def _words(name: str) -> frozenset[str]:
    return frozenset(name.split("_"))


def _role(key: str) -> str:
    return ".".join(key.split(".")[:2])


@dataclass
class Analysis:
    keys: KeyTree
    reads: Reads

    def read_by(self, key: str):
        """"all", a {selector: values} dict (engine-specific), or None (read by nothing)."""
        tags = self.reads.sites.get(key)
        if not tags:
            return None
        found = consumers(key, tags)
        return "all" if found is None else found

    def read_instead(self, key: str) -> list[str]:
        name = key.rsplit(".", 1)[-1]
        return sorted(
            other
            for other in self.keys.defaults
            if other != key and _role(other) == _role(key) and self.reads.sites.get(other)
            and _words(other.rsplit(".", 1)[-1]) == _words(name)
        )


def analyse(verl_root: Path) -> Analysis:
    keys = load_keys(verl_root)
    reads = collect_reads(verl_root, keys)
    propagate(reads, references(keys))
    return Analysis(keys, reads)


def unread_keys(verl_root: Path) -> dict[str, dict]:
    """``{"unread": {key: {default, read_instead}}, "engine_only": {key: {default, read_by, sites}}}``."""
    analysis = analyse(verl_root)
    unread, engine_only = {}, {}
    for key, default in sorted(analysis.keys.defaults.items()):
        found = analysis.read_by(key)
        if found is None:
            unread[key] = {"default": default, "read_instead": analysis.read_instead(key)}
        elif found != "all":
            sites = sorted(set(analysis.reads.sites[key].values()))
            engine_only[key] = {"default": default, "read_by": found, "sites": sites}
    return {"unread": unread, "engine_only": engine_only}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    import verl

    root = Path(verl.__file__).parent
    result = unread_keys(root)
    data = {
        "verl_version": version("verl"),
        "generated_by": "scripts/verl_unread_keys.py",
        "keys_analysed": len(load_keys(root).defaults),
        **result,
    }
    args.out.write_text(yaml.safe_dump(data, sort_keys=False, width=10**6))
    print(
        f"{args.out}: {data['keys_analysed']} keys; {len(result['unread'])} read by nothing, "
        f"{len(result['engine_only'])} read only by some engines (verl {data['verl_version']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
