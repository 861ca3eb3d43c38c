"""The config-section base: one declaration per key gives the typed view, the pre-Ray schema and the
docs' key table; every home's sections are assembled from the entry-point group."""

from __future__ import annotations

import importlib.metadata
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import Optional

import pytest
from omegaconf import OmegaConf

from verl_ascend import sections
from verl_ascend.sections import Section, boolean, int_in, key, positive_number

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Toy(Section):
    SECTION = "toy.part"
    OWNED_ELSEWHERE = ("sub",)

    wait_s: Optional[float] = key(0.5, "a number > 0 (seconds)", positive_number, null="forever")
    loud: bool = key(False, "true or false", boolean)
    count: int = key(2, "an integer from 0 to 4", int_in(0, 4))


def cfg(**values):
    return OmegaConf.create({"toy": {"part": values}})


def test_defaults_when_the_section_or_a_key_is_absent():
    assert Toy.from_config(OmegaConf.create({})) == Toy() == Toy(wait_s=0.5, loud=False, count=2)
    assert Toy.from_config(cfg(count=3)) == Toy(count=3)
    assert Toy.from_config(cfg(loud=None)).loud is False  # null keeps the default of a key without a null meaning
    assert Toy.from_config(cfg(wait_s=None)).wait_s is None  # ... and is the declared meaning where it has one
    with pytest.raises(FrozenInstanceError):
        Toy().loud = True


def test_the_typed_view_parses_text_and_mappings():
    parsed = Toy.from_config(cfg(wait_s="2", loud="yes", sub={"anything": 1}))
    assert (parsed.wait_s, parsed.loud, parsed.count) == (2.0, True, 2)
    assert Toy.from_config({"toy": {"part": {"loud": "off", "count": 0}}}) == Toy(loud=False, count=0)


@pytest.mark.parametrize("values, needle", [
    ({"wait_s": 0}, "toy.part.wait_s=0: expected a number > 0 (seconds)"),
    ({"wait_s": "soon"}, "toy.part.wait_s='soon': expected a number > 0 (seconds)"),
    ({"count": 5}, "toy.part.count=5: expected an integer from 0 to 4"),
    ({"count": True}, "toy.part.count=True: expected an integer from 0 to 4"),
    ({"count": 2.5}, "toy.part.count=2.5: expected an integer from 0 to 4"),
    ({"loud": "maybe"}, "toy.part.loud='maybe' is not a boolean"),
    ({"lound": True}, "toy.part.lound: unknown key; accepted keys: ['wait_s', 'loud', 'count', 'sub']"),
])
def test_the_typed_view_refuses_naming_the_key_and_what_is_accepted(values, needle):
    with pytest.raises(ValueError) as info:
        Toy.from_config(cfg(**values))
    assert needle in str(info.value)


def test_problems_lists_every_violation_at_once_as_composed():
    found = Toy.problems(cfg(wait_s=-1, loud="yes", count=9, lound=1, sub={}))
    assert found == [
        "toy.part.lound: unknown key; accepted keys: ['wait_s', 'loud', 'count', 'sub']",
        "toy.part.wait_s=-1: accepted: a number > 0 (seconds)",
        "toy.part.loud='yes': accepted: true or false",  # the schema takes values as composed: a YAML bool
        "toy.part.count=9: accepted: an integer from 0 to 4",
    ]
    assert Toy.problems(cfg(wait_s=None, loud=True, count=0)) == []
    assert Toy.problems(OmegaConf.create({})) == []
    assert Toy.problems(OmegaConf.create({"toy": {"part": 3}})) == [
        "toy.part=3: accepted: a mapping of ['wait_s', 'loud', 'count', 'sub']"]


def test_an_unresolvable_value_is_named():
    (line,) = Toy.problems(OmegaConf.create({"toy": {"part": {"count": "${oc.env:NO_SUCH_VARIABLE_OF_OURS}"}}}))
    assert line.startswith("toy.part.count: cannot be resolved")


def test_keys_and_the_table_come_from_the_declaration():
    assert Toy.keys() == [("toy.part.wait_s", 0.5, "a number > 0 (seconds)"), ("toy.part.loud", False, "true or false"),
                          ("toy.part.count", 2, "an integer from 0 to 4")]
    table = sections.markdown_table([Toy]).splitlines()
    where = f"`{Toy.__module__.replace('.', '/')}.py::Toy`"
    assert table[2] == f"| `toy.part.wait_s` | `0.5` | a number > 0 (seconds); null: forever | {where} |"
    assert table[3].startswith("| `toy.part.loud` | `false` |")


def test_every_home_declares_its_sections_through_the_entry_point_group():
    by_name = {s.SECTION: f"{s.__module__}:{s.__qualname__}" for s in sections.declared()}
    assert by_name == {
        "doctor": "verl_ascend.checks.options:DoctorOptions",
        "fault_tolerance": "verl_ascend.run.options:FaultTolerance",
        "memory": "verl_ascend.memory.options:MemoryOptions",
        "profile_check": "verl_ascend.run.trace_check:ProfileCheckOptions",
        "trainer.v1.dapo_ascend": "recipe.dapo_ascend.options:DapoAscendOptions",
        "trainer.v1.dapo_ascend.rollout_tail": "recipe.dapo_ascend.rollout_tail.policy:TailPolicy",
    }
    # setup.py names the same declarations (the installed metadata is not older than setup.py)
    setup = (REPO / "setup.py").read_text()
    for ep in importlib.metadata.entry_points(group=sections.ENTRY_POINT_GROUP):
        assert f'"{ep.name} = {ep.value}"' in setup


def test_an_empty_group_is_an_error_not_silence(monkeypatch):
    monkeypatch.setattr(sections, "_declared", None)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    with pytest.raises(RuntimeError, match="no config sections in the entry-point group verl_ascend.sections"):
        sections.declared()


def test_the_docs_show_the_declared_keys():
    """docs/architecture.md (+ zh) carries the table ``verl-ascend keys`` prints: each key with
    its declared default and what is accepted."""
    table = sections.markdown_table()
    for doc in ("architecture.md", "architecture_zh.md"):
        text = (REPO / "docs" / doc).read_text(encoding="utf-8")
        assert table in text, f"docs/{doc}: paste the output of `verl-ascend keys`"
