"""One declaration per config key: each config section of ours is a frozen dataclass.

A section's fields are declared once, with :func:`key`: the default, what is accepted (the words a
refusal prints) and the range check. Everything else is derived from that one declaration:

- ``Section.from_config(config)`` -- the typed view the code reads: each value parsed (booleans through
  ``verl_ascend.envs.parse_bool``, numbers from numeric text), range-checked, unknown keys refused, each
  error naming the key and what is accepted;
- ``Section.problems(config)`` -- the pre-Ray schema's lines for the section, every violation at once
  (``key=value: accepted: ...``); the values are taken as composed, not parsed;
- ``Section.keys()`` -- (dotted key, default, accepted) for the YAML test and the docs' key table.

Each home declares its sections next to the code that reads them and registers each in the entry-point
group ``verl_ascend.sections`` (setup.py); :func:`declared` assembles them without this module importing
any home, and :func:`problems` asks every one of them. ``verl-ascend keys`` prints the
table of keys that ``docs/architecture.md`` shows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Optional

from verl_ascend.envs import parse_bool

ENTRY_POINT_GROUP = "verl_ascend.sections"
REINSTALL = "the installed entry points may be older than setup.py: reinstall with `pip install --no-deps -e .`"
ABSENT = object()


# ------------------------------------------------------------------------------------ range checks
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def number(v: Any) -> Optional[float]:
    """``v`` as a finite float (int, float or a numeric string), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(float(v)) else None
    return None


def boolean(v: Any) -> bool:
    return isinstance(v, bool)


def any_int(v: Any) -> bool:
    return _is_int(v)


def positive_int(v: Any) -> bool:
    return _is_int(v) and v >= 1


def non_negative_int(v: Any) -> bool:
    return _is_int(v) and v >= 0


def int_in(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: _is_int(v) and low <= v <= high


def positive_number(v: Any) -> bool:
    n = number(v)
    return n is not None and n > 0


def non_negative_number(v: Any) -> bool:
    n = number(v)
    return n is not None and n >= 0


def probability(v: Any) -> bool:
    n = number(v)
    return n is not None and 0 < n <= 1


def one_of(values: Iterable[str]) -> Callable[[Any], bool]:
    allowed = tuple(values)
    return lambda v: isinstance(v, str) and v in allowed


# ------------------------------------------------------------------------------------ declaration
def key(default: Any, accepted: str, ok: Callable[[Any], bool], *, null: str = "") -> Any:
    """A field of a section: its default, what is accepted (in words) and the check of a value.

    ``null``: what an explicit null means, for a key that accepts it (empty: null keeps the default).
    The value's type follows the default's: bool, int, float or str (``float`` also for a null default).
    """
    return dataclasses.field(default=default, metadata={"accepted": accepted, "ok": ok, "null": null})


class SectionError(ValueError):
    """A value of one of our config sections that is not accepted (the message names the key)."""


class Section:
    """Base of a config section of ours: subclasses are ``@dataclass(frozen=True)`` with :func:`key` fields."""

    SECTION: ClassVar[str] = ""  # the dotted place in the config, e.g. "fault_tolerance"
    # Keys of the section that another declaration owns (a subsection such as rollout_tail).
    OWNED_ELSEWHERE: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def keys(cls) -> list[tuple[str, Any, str]]:
        """(dotted key, default, accepted) of every field, in declaration order."""
        return [(f"{cls.SECTION}.{f.name}", f.default, f.metadata["accepted"]) for f in dataclasses.fields(cls)]

    @classmethod
    def known(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)] + list(cls.OWNED_ELSEWHERE)

    @classmethod
    def _unknown(cls, node: Any) -> list[str]:
        known = cls.known()
        return [f"{cls.SECTION}.{name}: unknown key; accepted keys: {known}" for name in node if name not in known]

    @classmethod
    def from_config(cls, config: Any) -> "Section":
        """The typed view of the section in ``config`` (an OmegaConf config or a nested mapping)."""
        return cls.from_mapping(lookup(config, cls.SECTION))

    @classmethod
    def from_mapping(cls, node: Any) -> "Section":
        """The typed view of the section's own mapping (e.g. keyword arguments upstream passes on as they are)."""
        if node is ABSENT or node is None:
            return cls()
        if not isinstance(node, Mapping):
            raise SectionError(f"{cls.SECTION}={node!r}: accepted: a mapping of {cls.known()}")
        unknown = cls._unknown(node)
        if unknown:
            raise SectionError(unknown[0])
        values = {}
        for f in dataclasses.fields(cls):
            raw = node.get(f.name, ABSENT)
            if raw is ABSENT or (raw is None and not f.metadata["null"]):
                continue
            values[f.name] = None if raw is None else _parse(f, f"{cls.SECTION}.{f.name}", raw)
        return cls(**values)

    @classmethod
    def problems(cls, config: Any) -> list[str]:
        """Every value of the section that is not accepted, as composed: ``key=value: accepted: ...``."""
        try:
            node = lookup(config, cls.SECTION, resolve=False)
        except ValueError as exc:
            return [str(exc)]
        if node is ABSENT or node is None:
            return []
        if not isinstance(node, Mapping):
            return [f"{cls.SECTION}={show(node)}: accepted: a mapping of {cls.known()}"]
        found = cls._unknown(node)
        for f in dataclasses.fields(cls):
            dotted = f"{cls.SECTION}.{f.name}"
            try:
                value = lookup(config, dotted)
            except ValueError as exc:
                found.append(str(exc))
                continue
            if value is not ABSENT and value is not None and not f.metadata["ok"](value):
                found.append(f"{dotted}={show(value)}: accepted: {f.metadata['accepted']}")
        return found


def _parse(f: dataclasses.Field, dotted: str, raw: Any) -> Any:
    kind = type(f.default) if f.default is not None else float
    accepted = f.metadata["accepted"]
    if kind is bool:
        value = parse_bool(dotted, raw)
    elif kind is float:
        value = number(raw)
    elif kind is str:
        value = raw if isinstance(raw, str) else None
    else:
        value = raw if _is_int(raw) else None
    if value is None or not f.metadata["ok"](value):
        raise SectionError(f"{dotted}={raw!r}: expected {accepted}")
    return value


def lookup(config: Any, dotted: str, resolve: bool = True) -> Any:
    """The value at ``dotted`` (``ABSENT`` when not there): from an OmegaConf config, interpolations
    resolved (ValueError naming the key when one cannot be), or from nested mappings / attributes."""
    if config is None:
        return ABSENT
    from omegaconf import DictConfig, OmegaConf

    if isinstance(config, DictConfig):
        try:
            value = OmegaConf.select(config, dotted, default=ABSENT, throw_on_missing=True)
            return OmegaConf.to_container(value, resolve=resolve) if OmegaConf.is_config(value) else value
        except Exception as exc:  # an interpolation to a missing key or env var, a missing value (???)
            raise ValueError(f"{dotted}: cannot be resolved ({type(exc).__name__}: {exc})") from exc
    node = config
    for part in dotted.split("."):
        if isinstance(node, Mapping):
            node = node.get(part, ABSENT)
        else:
            node = getattr(node, part, ABSENT)
        if node is ABSENT:
            return ABSENT
    return node


def show(value: Any) -> str:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=False)
    return repr(value)


# ------------------------------------------------------------------------------------ assembly
_declared: Optional[tuple[type[Section], ...]] = None


def declared() -> tuple[type[Section], ...]:
    """Every home's sections, from the entry-point group ``verl_ascend.sections``, once per process."""
    global _declared
    if _declared is None:
        from importlib.metadata import entry_points

        found = tuple(ep.load() for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name))
        if not found:  # metadata older than setup.py: our own keys would silently go unchecked
            raise RuntimeError(f"no config sections in the entry-point group {ENTRY_POINT_GROUP}; {REINSTALL}")
        bad = [s for s in found if not (isinstance(s, type) and issubclass(s, Section) and s.SECTION)]
        if bad:
            raise TypeError(f"entry points of {ENTRY_POINT_GROUP} must name Section subclasses with a SECTION: {bad}")
        _declared = found
    return _declared


def problems(config: Any) -> list[str]:
    """The pre-Ray schema's lines for every declared section of ours."""
    return [line for section in declared() for line in section.problems(config)]


def markdown_table(sections: Optional[Iterable[type[Section]]] = None) -> str:
    """The docs' table of our own keys: key, default, accepted, and the class that declares it."""
    rows = ["| key | default | accepted | declared in |", "|---|---|---|---|"]
    for section in sections or declared():
        where = f"`{section.__module__.replace('.', '/')}.py::{section.__name__}`"
        for f in dataclasses.fields(section):
            shown = str(f.default).lower() if isinstance(f.default, bool) else f.default
            accepted = f.metadata["accepted"] + (f"; null: {f.metadata['null']}" if f.metadata["null"] else "")
            rows.append(f"| `{section.SECTION}.{f.name}` | `{shown}` | {accepted} | {where} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """``verl-ascend keys``: the docs' table of every declared key."""
    from verl_ascend.checks.exits import OK
    from verl_ascend.cli import parser  # here, not at the top: the checks this module's users import read it

    parser("keys", markdown_table.__doc__, ["verl-ascend keys | grep rollout_tail"]).parse_args(argv)
    print(markdown_table())
    return OK
