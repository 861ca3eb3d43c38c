"""The checks' one exit-status table (``verl_ascend/checks/exits.py``) is the only source of the statuses
of the check surface: no command module spells a status as a number of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from verl_ascend.checks import exits
from verl_ascend.cli import commands

REPO = Path(__file__).resolve().parents[3]
# The module of every ``verl-ascend`` command (verl_ascend/cli.py), the table itself, and the modules that hand
# a command its status: the CPU backend's refusal before Ray, the acceptance report's verdict.
def _module_file(module: str) -> str:
    path = module.replace(".", "/")
    return f"{path}/__init__.py" if (REPO / path).is_dir() else f"{path}.py"


COMMANDS = tuple(sorted({_module_file(c.target.partition(":")[0]) for c in commands()})) + (
    "verl_ascend/cli.py",
    "verl/cpu/patches.py",
    "verl/ascend/accept/record.py",
)


def _literal_statuses(path: Path, root: Path = REPO) -> list[str]:
    """``return 1`` / ``sys.exit(2)`` / ``SystemExit(2)`` / ``x = 1 if ... else 0`` returned: a number where a
    status is given, with its line."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def numbers(node) -> list[int]:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return [node.value]
        if isinstance(node, ast.IfExp):
            return numbers(node.body) + numbers(node.orelse)
        if isinstance(node, ast.Tuple):  # return (status, text)
            return numbers(node.elts[0]) if node.elts else []
        return []

    for node in ast.walk(tree):
        value = None
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
        elif isinstance(node, ast.Call) and node.args:
            name = ast.unparse(node.func)
            if name in ("sys.exit", "exit", "SystemExit", "parser.exit"):
                value = node.args[0]
        for number in numbers(value) if value is not None else []:
            found.append(f"{path.relative_to(root)}:{node.lineno}: status {number}")
    return found


def test_the_table_is_0_ok_1_failed_2_refused():
    assert (exits.OK, exits.FAILED, exits.REFUSED) == (0, 1, 2)


def test_no_check_command_spells_a_status_as_a_number():
    found = [hit for rel in COMMANDS for hit in _literal_statuses(REPO / rel)]
    # Helpers that return counts, not statuses, would be listed here by name; there are none.
    assert found == [], "use verl_ascend.checks.exits (OK, FAILED, REFUSED):\n" + "\n".join(found)


def test_the_scan_sees_a_literal_status(tmp_path):
    """The scan itself: each way a number can be handed out as a status is caught."""
    (tmp_path / "cmd.py").write_text(
        "import sys\n"
        "def main():\n    return 1\n"
        "def other(ok):\n    return 0 if ok else 2\n"
        "def pair():\n    return 1, 'text'\n"
        "if __name__ == '__main__':\n    sys.exit(2)\n"
    )
    hits = _literal_statuses(tmp_path / "cmd.py", tmp_path)
    assert hits == ["cmd.py:3: status 1", "cmd.py:5: status 0", "cmd.py:5: status 2", "cmd.py:7: status 1",
                    "cmd.py:9: status 2"]
