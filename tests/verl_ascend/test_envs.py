"""The env-var registry: every variable of ours that the code names is declared by a home, each home declares
its own (entry-point group ``verl_ascend.envs``), the docs' table is what the declarations print, and there is one
bool parser."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ascend import envs

REPO = Path(__file__).resolve().parents[2]
HOMES = ("verl/ascend", "verl/cpu", "verl_ascend", "recipe/dapo_ascend")
OURS = re.compile(r"^(VERL_ASCEND_|VERL_CPU_|VERL_HF_)[A-Z0-9_]+$|^DRY_RUN$")


def _modules():
    for home in HOMES:
        yield from sorted((REPO / home).rglob("*.py"))


def names_in(source: str) -> set[str]:
    """Every string constant in ``source`` that is one of our variable names."""
    return {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and OURS.match(n.value)}


def truthy_tuples_in(source: str) -> int:
    """How many literal collections spell out boolean words (the registry owns the only one)."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            count += {"true", "yes"} <= {w.lower() for w in words}
    return count


def test_every_variable_the_code_names_is_registered():
    missing = {}
    for path in _modules():
        for name in names_in(path.read_text()) - set(envs.declared()):
            missing.setdefault(name, []).append(str(path.relative_to(REPO)))
    assert not missing, f"undeclared variables (add a row to the envs.py of the home that reads it): {missing}"


DECLARING = {"ascend": "verl/ascend/envs.py", "cpu": "verl/cpu/envs.py", "dapo_ascend": "recipe/dapo_ascend/envs.py",
             "verl_ascend": "verl_ascend/envs.py"}


def test_each_home_declares_its_own_variables_through_the_entry_point_group():
    group = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=envs.ENTRY_POINT_GROUP)}
    assert group == {name: path[:-3].replace("/", ".") + ":VARIABLES" for name, path in DECLARING.items()}
    for name, path in DECLARING.items():
        home = str(Path(path).parent)
        module = importlib.import_module(group[name].split(":")[0])
        assert module.VARIABLES, path
        for spec in module.VARIABLES:  # declared in the home of the file that reads it
            assert spec.read_by.startswith(home + "/") and (REPO / spec.read_by).is_file(), (path, spec)
            assert spec.name in (REPO / spec.read_by).read_text(), (spec.name, spec.read_by)
    assert len(envs.declared()) == sum(len(importlib.import_module(v.split(":")[0]).VARIABLES) for v in group.values())


def test_a_homes_declaring_module_imports_nothing_but_the_registry():
    """The assembly loads every home's module, also while a home is being imported (a lookup at import
    time): a declaring module that imported its home's code could find itself half-initialised."""
    for path in set(DECLARING.values()) - {"verl_ascend/envs.py"}:  # the registry holds the toolkit's own
        tree = ast.parse((REPO / path).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert imported <= {"__future__", "verl_ascend.envs"}, (path, imported)


@pytest.mark.parametrize("page", ["architecture.md", "architecture_zh.md"])
def test_the_docs_table_is_what_the_declarations_print(page):
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    assert envs.markdown_table() in text, f"paste `verl-ascend envs --markdown` into docs/{page}"


def test_a_toolkit_lookup_loads_no_home():
    """The offline report reads the toolkit's own variables without importing upstream verl."""
    code = ("import sys; from verl_ascend import envs; envs.flag('VERL_ASCEND_DOCTOR_STRICT', {}); "
            "envs.raw('VERL_ASCEND_OUTPUT_DIR', {}); print('verl' in sys.modules, envs._declared is None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "True"]


def test_scanner_finds_an_unregistered_name():
    assert names_in('os.environ.get("VERL_ASCEND_NEW_SWITCH")') == {"VERL_ASCEND_NEW_SWITCH"}
    assert truthy_tuples_in('TRUE = ("1", "true", "yes", "on")') == 1


def test_only_the_registry_spells_boolean_words():
    spelled = {str(p.relative_to(REPO)): truthy_tuples_in(p.read_text()) for p in _modules()}
    offenders = {p: n for p, n in spelled.items() if n and p != "verl_ascend/envs.py"}
    assert not offenders, f"use verl_ascend.envs.parse_bool/flag instead: {offenders}"


@pytest.mark.parametrize("text, value", [("1", True), ("TRUE", True), (" yes ", True), ("on", True),
                                         ("0", False), ("False", False), ("no", False), ("off", False), ("", False)])
def test_one_parser_for_every_boolean(text, value):
    assert envs.parse_bool("DRY_RUN", text) is value
    assert envs.flag("DRY_RUN", {"DRY_RUN": text}) is value


def test_unreadable_values_name_the_variable_and_what_is_accepted():
    with pytest.raises(envs.EnvValueError, match=r"DRY_RUN='maybe' is not a boolean.*1, true, yes, on.*0, false, no, off"):
        envs.flag("DRY_RUN", {"DRY_RUN": "maybe"})
    with pytest.raises(envs.EnvValueError, match=r"VERL_HF_ROLLOUT_THREADS='two': expected an integer"):
        envs.number("VERL_HF_ROLLOUT_THREADS", {"VERL_HF_ROLLOUT_THREADS": "two"})
    with pytest.raises(KeyError, match="VERL_ASCEND_TYPO is not a registered variable"):
        envs.flag("VERL_ASCEND_TYPO", {})


def test_defaults_apply_when_unset():
    assert envs.flag("VERL_ASCEND_DOCTOR", {}) is True
    assert envs.flag("DRY_RUN", {}) is False
    assert envs.number("VERL_HF_ROLLOUT_BATCH_WAIT_MS", {}) == 5.0
    assert envs.number("VERL_ASCEND_EMULATOR_DEVICES", {"VERL_ASCEND_EMULATOR_DEVICES": "4"}) == 4


def test_cli_prints_every_row(capsys):
    assert envs.main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in envs.declared())
    assert envs.main(["--markdown"]) == 0
    assert capsys.readouterr().out.strip() == envs.markdown_table()
