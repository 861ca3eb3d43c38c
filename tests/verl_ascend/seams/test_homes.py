"""Each home declares its own seam rows; the toolkit assembles one index and installs every stage.

Checked: every home's ``seams.py`` is registered in the entry-point group ``verl_ascend.seams``
and the index is exactly their rows, each id once, each row next to the code it names; the
toolkit's mechanism holds no row; a second declaration of an id, a declaration that is not a
tuple of rows and a row with an unknown stage are refused naming the home; every stage with an
installer is installed by ``install(stage)`` (the ``trainer`` stage by the run journal, the
``vllm`` stage by the ``vllm.general_plugins`` entry point) and no code calls an installer itself.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugins: installs the "plugin" stage)
from verl_ascend.seams import index, scan
from verl_ascend.seams.index import ENTRY_POINT_GROUP, STAGES, SeamIndexError

REPO = Path(__file__).resolve().parents[3]
HOMES = {"verl/ascend": "verl.ascend", "verl/cpu": "verl.cpu", "recipe/dapo_ascend": "recipe.dapo_ascend",
         "verl_ascend": "verl_ascend"}


def _declarations() -> dict[str, str]:
    """module of each home's ``seams.py`` -> its home folder (the mechanism package excluded)."""
    found = {}
    for folder in HOMES:
        for path in (REPO / folder).rglob("seams.py"):
            found[scan.module_name(path.relative_to(REPO).as_posix())] = folder
    return found


def test_every_home_module_is_registered_and_the_index_is_their_rows():
    declared = _declarations()
    assert set(declared.values()) == set(HOMES), declared  # each home has one
    points = {ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert points == {f"{module}:SEAMS" for module in declared}
    rows = [seam for module in sorted(declared) for seam in importlib.import_module(module).SEAMS]
    ids = [seam.id for seam in rows]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert sorted(ids) == sorted(s.id for s in index.SEAMS) and len(index.SEAMS) >= 29


@pytest.mark.parametrize("seam", index.SEAMS, ids=[s.id for s in index.SEAMS])
def test_a_row_lives_in_the_home_of_its_code(seam):
    (module,) = [m for m in _declarations() if seam in importlib.import_module(m).SEAMS]
    folder = _declarations()[module]
    assert seam.code.startswith(folder + "/"), f"{seam.id}: declared in {module}, code in {seam.code}"
    if seam.install:
        assert seam.install.startswith(HOMES[folder] + "."), f"{seam.id}: installer {seam.install} of another home"


def test_the_mechanism_holds_no_row():
    for path in sorted((REPO / "verl_ascend" / "seams").glob("*.py")):
        calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]
        assert not [c for c in calls if ast.unparse(c.func) == "Seam"], f"{path}: declares rows"


HOME_MODULE = '''
from verl_ascend.seams.index import Seam

def row(id, stage="none"):
    return Seam(id=id, target="t", test="t", code="c", stage=stage)

A = (row("shared"), row("only_a"))
B = (row("shared"),)
ODD = [row("listed")]
BAD_STAGE = (row("late", stage="later"),)
'''


def _points(tmp_path, monkeypatch, *attrs):
    (tmp_path / "seam_home_probe.py").write_text(HOME_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("seam_home_probe", None)
    return [importlib.metadata.EntryPoint(f"h{i}_{a}", f"seam_home_probe:{a}", ENTRY_POINT_GROUP)
            for i, a in enumerate(attrs)]


def test_a_row_declared_by_two_homes_is_refused_naming_both(tmp_path, monkeypatch):
    assert [s.id for s in index.assemble(_points(tmp_path, monkeypatch, "A"))] == ["shared", "only_a"]
    twice = r"'shared' is declared twice, by seam_home_probe:A and by seam_home_probe:B"
    with pytest.raises(SeamIndexError, match=twice):
        index.assemble(_points(tmp_path, monkeypatch, "A", "B"))


def test_a_home_that_cannot_be_loaded_is_named(tmp_path, monkeypatch):
    gone = importlib.metadata.EntryPoint("moved", "seam_home_gone:SEAMS", ENTRY_POINT_GROUP)
    named = r"moved = seam_home_gone:SEAMS .*cannot be loaded \(ModuleNotFoundError.*reinstall"
    with pytest.raises(SeamIndexError, match=named):
        index.assemble([gone])


def test_an_empty_index_is_refused(monkeypatch):
    """Metadata without the group (installed before it existed) must not silently install nothing."""
    monkeypatch.setattr(index, "_index", None)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    with pytest.raises(SeamIndexError, match=r"no seam rows in the entry-point group verl_ascend.seams; .*reinstall"):
        index.assembled()


def test_a_declaration_that_is_not_rows_is_refused(tmp_path, monkeypatch):
    with pytest.raises(SeamIndexError, match=r"h0_ODD = seam_home_probe:ODD .*expected a tuple of Seam rows, got list"):
        index.assemble(_points(tmp_path, monkeypatch, "ODD"))
    with pytest.raises(SeamIndexError, match=r"row 'late' has kind 'runtime-patch' and stage 'later'; .*stages"):
        index.assemble(_points(tmp_path, monkeypatch, "BAD_STAGE"))


# ----------------------------------------------------------------------------- one installer per stage
def _installers(stage: str) -> list[str]:
    return list(dict.fromkeys(s.install for s in index.SEAMS if s.stage == stage and s.install))


@pytest.fixture
def fresh(monkeypatch):
    """Forget, for one test, that this process ran some installers (restored afterwards)."""
    def forget(paths):
        for path in paths:
            if path in index._installed:
                monkeypatch.delitem(index._installed, path)
    return forget


def test_the_plugin_stage_ran_through_install():
    """``import verl`` ran every plugin-stage installer, and only install() records one."""
    assert _installers("plugin") and set(_installers("plugin")) <= set(index._installed)


def test_the_trainer_stage_is_installed_by_the_run_journal(fresh, monkeypatch, tmp_path):
    from verl.utils import tracking

    from verl_ascend.run import files
    from verl_ascend.run.journal import RunJournal

    assert _installers("trainer") == ["verl_ascend.run.metrics_append:install_metrics_append"]
    monkeypatch.setattr(tracking, "FileLogger", tracking.FileLogger)  # restored after the test
    upstream = tracking.FileLogger
    fresh(_installers("trainer"))
    monkeypatch.setenv(files.ENV_METRICS_APPEND, "1")
    RunJournal(OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}}), run_dir=None)
    assert tracking.FileLogger is not upstream and tracking.FileLogger._verl_ascend_appends
    assert index.installed()["verl_ascend.run.metrics_append:install_metrics_append"] == ["file_logger_append"]
    assert index.install("trainer") == []  # once per process


def test_the_vllm_stage_is_installed_by_the_general_plugin(fresh, monkeypatch, tmp_path):
    """vLLM calls each ``vllm.general_plugins`` entry point; ours installs the ``vllm`` stage."""
    assert _installers("vllm") == ["verl.ascend.env.vllm_plugin:register"]
    (plugin,) = [ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins")
                 if ep.name == "verl_ascend_env_check"]
    assert plugin.value == "verl_ascend.seams.index:install_vllm_stage"
    fresh(_installers("vllm"))
    monkeypatch.setenv("VERL_ASCEND_VLLM_ENV_REPORT", str(tmp_path))  # off the NPU: the row only writes this
    plugin.load()()
    record = json.loads((tmp_path / f"{os.getpid()}.json").read_text())
    assert record["pid"] == os.getpid()
    assert index.installed()["verl.ascend.env.vllm_plugin:register"] == ["vllm_env_check"]


@pytest.mark.parametrize("stage", [s for s in STAGES if s not in ("plugin", "trainer", "vllm")])
def test_a_stage_without_installers_installs_nothing(stage):
    """No code calls install("worker") / install("driver") yet: an installer there would never run."""
    assert _installers(stage) == [], f"nothing calls install({stage!r}); call it where the {stage} stage begins"
    assert index.install(stage) == []


def test_no_code_calls_an_installer_itself():
    paths = {s.install for s in index.SEAMS if s.install}
    found = scan.installer_calls(scan.product_files(REPO), paths)
    assert not found, "installers must run through verl_ascend.seams.install(stage):\n" + "\n".join(map(str, found))
    ours = importlib.metadata.distribution("verl-ascend").entry_points
    assert not [ep for ep in ours if ep.value in paths], "an entry point names an installer; use install(stage)"


def test_the_installer_scan_sees_every_spelling():
    source = (
        "from verl.cpu import patches\nfrom verl.cpu.patches import install as go\n"
        "import verl.ascend.env.vllm_plugin as vp\n\ndef f():\n    patches.install()\n    go()\n    vp.register()\n"
        "    patches.other()\n"
    )
    paths = {"verl.cpu.patches:install", "verl.ascend.env.vllm_plugin:register"}
    found = scan.installer_calls({"recipe/x/a.py": source}, paths)
    assert [(c.line, c.name) for c in found] == [
        (6, "verl.cpu.patches:install"), (7, "verl.cpu.patches:install"), (8, "verl.ascend.env.vllm_plugin:register")]
