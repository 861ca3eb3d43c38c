"""Tests mirror the packages: each test file sits in the folder of the package it tests.

``tests/<folder>/.../test_*.py`` maps to a product package folder that must exist:

====================  ==================================================================
tests/npu/            verl/ascend/  (named for how it runs: in its own process, through the
                      NPU emulator or on a real NPU -- `make test` runs it separately)
tests/cpu/            verl/cpu/
tests/verl_ascend/X/  verl_ascend/X/
tests/recipe/X/       recipe/dapo_ascend/X/
tests/                only the distribution-wide sanity tests named in ``ROOT_TESTS``
====================  ==================================================================

End-to-end tests (marker ``e2e``) live with the package whose behaviour they check.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
MIRROR = {"npu": "verl/ascend", "cpu": "verl/cpu", "verl_ascend": "verl_ascend", "recipe": "recipe/dapo_ascend"}
ROOT_TESTS = {"test_architecture.py", "test_layout.py", "test_launch.py"}


def package_for(test_file: Path, tests: Path = TESTS, repo: Path = REPO) -> Path | None:
    """The product package folder ``test_file`` mirrors (None when its folder mirrors nothing)."""
    parts = test_file.relative_to(tests).parts[:-1]
    if not parts or parts[0] not in MIRROR:
        return None
    return repo.joinpath(MIRROR[parts[0]], *parts[1:])


def misplaced(tests: Path = TESTS, repo: Path = REPO) -> list[str]:
    out = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if len(rel.parts) == 1:
            if rel.name not in ROOT_TESTS:
                out.append(f"tests/{rel}: a root test must be a sanity test listed in ROOT_TESTS")
            continue
        package = package_for(path, tests, repo)
        if package is None or not package.is_dir():
            out.append(f"tests/{rel}: mirrors no package ({package.relative_to(repo) if package else rel.parts[0]!s} missing)")
    return out


def test_every_test_file_mirrors_a_package():
    assert not misplaced(), "\n".join(misplaced())


def test_a_misplaced_test_is_reported(tmp_path):
    tests, repo = tmp_path / "tests", tmp_path
    (repo / "verl_ascend" / "run").mkdir(parents=True)
    for rel in ("verl_ascend/run/test_ok.py", "verl_ascend/nowhere/test_lost.py", "misc/test_x.py", "test_root.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    found = misplaced(tests, repo)
    assert len(found) == 3
    assert any("nowhere/test_lost.py" in f and "verl_ascend/nowhere missing" in f for f in found)
    assert any("misc/test_x.py" in f for f in found) and any("test_root.py" in f for f in found)
