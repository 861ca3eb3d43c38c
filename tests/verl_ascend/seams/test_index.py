"""The seam index (assembled by verl_ascend/seams from every home's rows): complete rows, every fingerprint, no
contact left out.

A fingerprint mismatch means the upstream code a row depends on changed: read the new code,
re-verify the row (and its tests), then update the fingerprint in the row's home (its ``seams.py``).
A contact reported missing means code of ours reaches into upstream without a row: add one.
Needs no NPU emulator (the NPU-specific checks stay in tests/npu/test_patch_index.py).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

import verl  # noqa: F401  (loads the plugins: installs the "plugin" stage)
from verl_ascend.checks.exits import REFUSED
from verl_ascend.seams import cli
from verl_ascend.seams import index, scan
from verl_ascend.seams.index import KINDS, SEAMS, SEAMS_BY_ID, STAGES, HasAttr, Seam, source_fingerprint

REPO = Path(__file__).resolve().parents[3]
MEMBERS = [(s.id, spec, h) for s in SEAMS for spec, h in s.fingerprints.items()]


@pytest.mark.parametrize("seam", SEAMS, ids=[s.id for s in SEAMS])
def test_row_is_complete(seam):
    for name in ("target", "test", "code"):
        assert getattr(seam, name).strip(), f"{seam.id}: empty {name}"
    assert seam.kind in KINDS and seam.stage in STAGES, seam.id
    test_file = seam.test.split("::", 1)[0]
    assert (REPO / test_file).exists(), f"{seam.id}: {test_file} missing"
    if seam.install:
        module, _, func = seam.install.partition(":")
        assert seam.stage not in ("none",) and func, f"{seam.id}: install {seam.install!r} without a stage"
        spec_path = REPO / (module.replace(".", "/") + ".py")
        package_path = REPO / module.replace(".", "/") / "__init__.py"
        assert spec_path.exists() or package_path.exists(), f"{seam.id}: {module} missing"
    # The code it names exists (rows must follow the code when it moves), and says why the row exists:
    # one of its files names the row's id (in the docstring of the code the row describes).
    paths = [REPO / where.split("::", 1)[0].split(" (", 1)[0].strip() for where in seam.code.split(", ")]
    assert all(path.exists() for path in paths), f"{seam.id}: code {seam.code!r} missing"
    files = [f for path in paths for f in ([path] if path.is_file() else sorted(path.rglob("*.py")))]
    assert any(f"``{seam.id}``" in f.read_text() for f in files), f"{seam.id}: no code file of {seam.code!r} names it"
    # Only a row that touches no upstream member (vllm_env_check: an import observer) has none.
    assert seam.fingerprints or seam.covers or seam.id == "vllm_env_check", f"{seam.id}: no member"


def test_ids_are_unique():
    assert len(SEAMS_BY_ID) == len(SEAMS)


@pytest.mark.parametrize("row,spec,expected", MEMBERS, ids=[f"{r}:{s}" for r, s, _ in MEMBERS])
def test_fingerprint(row, spec, expected):
    assert source_fingerprint(spec) == expected, (
        f"row {row}: upstream {spec} changed; re-verify the row, then update its fingerprint"
    )


def test_every_contact_of_our_code_is_in_the_index():
    contacts = scan.scan(scan.product_files(REPO))
    assert len(contacts) > 40  # the scan sees the trainer mixins, the sampler, the backends
    missing = scan.uncovered(contacts, SEAMS)
    assert not missing, "contacts with upstream code that no seam row lists:\n" + "\n".join(map(str, missing))


SYNTHETIC = '''
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, _accumulate_eviction_metrics
import verl.utils.tracking as tracking


class Mixin:
    def _clear_groups(self, partition_id, uids):
        return super()._clear_groups(partition_id, uids)


class Sampler(Mixin, ReplayBuffer):
    def _materialize_batch(self, *a):
        return self._brand_new_private_thing()


def watch(buffer, trainer):
    def watched(*a):
        return None

    buffer.sample = watched
    trainer._secret_registry["x"] = 1
    tracking.FileLogger = object
'''


def _members(module, qualname):
    return {"_clear_groups", "_materialize_batch", "_brand_new_private_thing", "sample"}


def test_scan_reports_an_unlisted_contact():
    contacts = scan.scan({"recipe/x/synthetic.py": SYNTHETIC}, members=_members)
    found = {(c.name, c.rule) for c in contacts}
    assert {
        ("_accumulate_eviction_metrics", "private"),
        ("_clear_groups", "override"),  # a mixin of an upstream-based class
        ("_materialize_batch", "override"),
        ("_brand_new_private_thing", "override"),
        ("sample", "rebind"),
        ("_secret_registry", "private"),
        ("FileLogger", "rebind"),
    } <= found, found
    missing = {c.name for c in scan.uncovered(contacts, SEAMS)}
    assert {"_brand_new_private_thing", "_secret_registry"} <= missing
    assert "_clear_groups" not in missing and "sample" not in missing


def test_neutral_package_never_imports_a_backend_or_the_recipe():
    for path in sorted((REPO / "verl_ascend").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                assert not name.startswith(("verl.ascend", "verl.cpu", "recipe")), f"{path}: imports {name}"


def test_plugin_stage_is_installed_in_every_process():
    done = index.installed()
    assert "verl.cpu.patches:install" in done and "verl.ascend.patch.fsdp_engine:install" in done
    assert "cpu_process_group_backend" in done["verl.cpu.patches:install"]
    assert index.install("plugin") == []  # idempotent: everything of the stage already ran
    assert ("verl.ascend.emulator:install_if_requested" in done) == emulator_active()


def emulator_active() -> bool:
    return "torch_npu" in sys.modules and getattr(sys.modules["torch_npu"], "__verl_ascend_emulator__", False)


def _row(**kw):
    base = dict(id="synthetic", target="t", test="t", code="c")
    return Seam(**{**base, **kw})


def test_install_runs_each_path_once_per_process(tmp_path, monkeypatch):
    (tmp_path / "seam_probe.py").write_text("calls = []\ndef go():\n    calls.append(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = (
        _row(id="a", stage="trainer", install="seam_probe:go"),
        _row(id="b", stage="trainer", install="seam_probe:go"),
        _row(id="c", stage="worker", install="seam_probe:go_not"),
    )
    try:
        assert index.install("trainer", seams=rows) == ["seam_probe:go"]
        assert index.install("trainer", seams=rows) == []
        assert sys.modules["seam_probe"].calls == [1]
        assert index.installed()["seam_probe:go"] == []  # ran, though no row of the real index names it
        with pytest.raises(ValueError):
            index.install("nowhere", seams=rows)
    finally:
        index._installed.pop("seam_probe:go", None)


def test_command_prints_every_real_row(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-1]] == [s.id for s in SEAMS]
    assert all(line.split()[3] == "needed" for line in out[:-1]), out
    assert cli.main(["--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["id"] for r in rows} == set(SEAMS_BY_ID) and {r["status"] for r in rows} == {"needed"}


def test_command_lists_what_the_plugins_installed(capsys):
    assert cli.main(["--installed"]) == 0
    out = capsys.readouterr().out
    assert "verl.cpu.patches:install: cpu_process_group_backend" in out


def test_a_row_whose_condition_is_met_is_removable(capsys):
    gone = _row(id="gone", removable_if=(HasAttr("os.path:join"),))
    changed = _row(id="moved", fingerprints={"os.path:join": "0000000000000000"})
    assert cli.main(["--json"], seams=(gone, changed)) == 0
    rows = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["gone"]["status"] == "removable" and "os.path:join exists" in rows["gone"]["why"]
    assert rows["moved"]["status"] == "target-changed"
    assert cli.main(["--strict"], seams=(gone,)) == REFUSED
    assert cli.main(["--strict"], seams=(_row(id="kept", removable_if=(HasAttr("os.path:nope"),)),)) == 0


def test_conditions_against_installed_packages():
    assert index.VersionSatisfies("pytest", ">=1").check()[0]
    assert not index.VersionSatisfies("no-such-distribution-x", ">=1").check()[0]
    assert index.SourceContains("json:dumps", "def dumps").check()[0]
    assert index.SourceLacks("json:dumps", "no such text").check()[0]


def test_architecture_doc_lists_every_row_under_its_kind():
    """docs/architecture.md's seam table names each row once, in the line of its kind."""
    text = (REPO / "docs" / "architecture.md").read_text()
    lines = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ") and line.count("|") == 3}
    misplaced = [s.id for s in SEAMS if f"`{s.id}`" not in lines.get(s.kind, "")]
    assert not misplaced, f"docs/architecture.md seam table: rows missing or under the wrong kind: {misplaced}"


def test_command_scan_prints_the_raw_contacts_of_a_checkout(tmp_path, capsys):
    (tmp_path / "verl_ascend").mkdir()
    (tmp_path / "verl_ascend" / "m.py").write_text("from transformers.utils import _private_helper\n")
    assert cli.main(["--scan", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(c) for c in scan.scan(scan.product_files(tmp_path))] != []
