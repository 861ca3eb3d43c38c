"""``verl-ascend``: one console script whose subcommands are the rows of ``verl_ascend.cli.commands()``.

Each row must be reachable (its target imports and takes argv), explain itself (``--help`` names the command a
user typed, its exit statuses and the row's example), be the only way in (no ``python -m`` entry point of its own
left behind: a module path is not an interface), and be listed where users look (README, architecture pages)."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ascend import cli
from verl_ascend.checks.exits import OK, REFUSED

REPO = Path(__file__).resolve().parents[2]
ROWS = cli.commands()
CONSOLE_SCRIPT = Path(sys.executable).with_name("verl-ascend")


def _help(name: str, capsys, monkeypatch) -> tuple[int, str]:
    """``verl-ascend NAME --help`` in this process (argparse exits; sys.argv is the command's own while it runs)."""
    monkeypatch.setattr(sys, "argv", [str(CONSOLE_SCRIPT), name, "--help"])
    try:
        status = cli.main([name, "--help"])
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().out


def test_the_table_has_unique_names_and_well_formed_rows():
    names = [c.name for c in ROWS]
    assert len(names) == len(set(names)), names
    for c in ROWS:
        assert c.target.count(":") == 1 and c.summary and c.example.startswith(f"verl-ascend {c.name}"), c


def test_the_console_script_lists_every_command():
    proc = subprocess.run([str(CONSOLE_SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == OK, proc.stderr
    listed = {line.split()[0]: " ".join(line.split()[1:]) for line in proc.stdout.split("commands:\n")[1].splitlines()
              if line.startswith("  ")}
    assert listed == {c.name: c.summary for c in ROWS}


def test_python_dash_m_verl_ascend_is_the_same_command():
    """Scripts with an interpreter and no PATH (examples/*.sh, CI's PYTHON=.venv/bin/python) call it this way."""
    proc = subprocess.run([sys.executable, "-m", "verl_ascend", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == OK and proc.stdout.strip() == cli.usage(), proc.stderr


def test_an_unknown_command_is_refused_naming_the_accepted_ones(capsys):
    assert cli.main(["trian"]) == REFUSED
    err = capsys.readouterr().err
    assert "'trian'" in err and all(c.name in err for c in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda c: c.name)
def test_every_target_imports_and_takes_argv(row):
    module, _, function = row.target.partition(":")
    run = getattr(importlib.import_module(module), function)
    assert list(inspect.signature(run).parameters)[0] == "argv"


@pytest.mark.parametrize("row", ROWS, ids=lambda c: c.name)
def test_every_help_names_the_command_its_statuses_and_the_rows_example(row, capsys, monkeypatch):
    status, out = _help(row.name, capsys, monkeypatch)
    assert status == OK
    assert out.startswith(f"usage: verl-ascend {row.name}"), out[:200]
    assert f"exit status: {OK} ok; {REFUSED} refused" in out
    examples = out.split("\nexamples:\n", 1)[1].splitlines()
    assert examples[0].strip() == row.example
    assert all(e.strip().startswith(("verl-ascend", "DRY_RUN=")) for e in examples), examples


def _main_entries(path: Path, repo: Path) -> list[str]:
    """The ``if __name__ == "__main__":`` blocks of a module, by line."""
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(repo)}:{node.lineno}" for node in tree.body if isinstance(node, ast.If)
            and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)]


def old_entry_points(rows=ROWS, repo: Path = REPO) -> list[str]:
    """Every ``python -m`` way into a command of the table other than ``python -m verl_ascend``: a ``__main__``
    block in its module, a ``__main__.py`` in its package, a target that is itself a ``__main__`` module."""
    found = []
    for row in rows:
        module = row.target.partition(":")[0]
        path = repo.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        found += [f"{row.name}: target {module} is a __main__ module"] if path.stem == "__main__" else []
        found += [f"{row.name}: {where} runs it as a script" for where in _main_entries(path, repo)]
        package_main = path.parent / "__main__.py"
        if package_main.exists() and package_main != repo / "verl_ascend" / "__main__.py":
            found.append(f"{row.name}: {package_main.relative_to(repo)} runs its package as a script")
    return found


def test_no_command_keeps_a_python_dash_m_entry_point_of_its_own():
    assert old_entry_points() == []


def test_an_old_entry_point_is_found(tmp_path):
    """The scan above, on the shapes today's code had: a package __main__.py, a target module that is one, and
    a __main__ block."""
    main = "def main(argv): ...\n"
    for rel, text in {"a/__main__.py": "", "a/mod.py": main, "b/__main__.py": main,
                      "c/tool.py": main + "if __name__ == '__main__':\n    main(None)\n"}.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    rows = tuple(cli.Command(name, target, "s", f"verl-ascend {name}")
                 for name, target in (("a", "a.mod:main"), ("b", "b.__main__:main"), ("c", "c.tool:main")))
    assert old_entry_points(rows, tmp_path) == ["a: a/__main__.py runs its package as a script",
                                               "b: target b.__main__ is a __main__ module",
                                               "b: b/__main__.py runs its package as a script",
                                               "c: c/tool.py:2 runs it as a script"]


def test_setup_py_declares_the_console_script():
    tree = ast.parse((REPO / "setup.py").read_text())
    scripts = [ast.literal_eval(kw.value)["console_scripts"] for node in ast.walk(tree) if isinstance(node, ast.Call)
               for kw in node.keywords if kw.arg == "entry_points"]
    assert scripts == [["verl-ascend = verl_ascend.cli:entry"]]
    assert CONSOLE_SCRIPT.exists(), "pip install -e . creates it"


@pytest.mark.parametrize(("page", "statuses"), [("README.md", False), ("docs/architecture.md", True),
                                                ("docs/architecture_zh.md", True)])
def test_the_docs_show_the_table(page, statuses):
    assert cli.markdown_table(statuses) in (REPO / page).read_text(encoding="utf-8"), (
        f"paste `verl-ascend --help --markdown{' --statuses' if statuses else ''}` into {page}")


def test_the_markdown_option_prints_the_table(capsys):
    assert cli.main(["--help", "--markdown", "--statuses"]) == OK
    assert capsys.readouterr().out.strip() == cli.markdown_table(statuses=True)
