"""The env-var registry: every variable of ours that the code names is a row, and there is one bool parser."""

from __future__ import annotations

import ast
import re
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
        for name in names_in(path.read_text()) - set(envs.BY_NAME):
            missing.setdefault(name, []).append(str(path.relative_to(REPO)))
    assert not missing, f"unregistered variables (add a row to verl_ascend/envs.py): {missing}"


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
    assert all(v.name in out for v in envs.VARIABLES)
