"""The floor plan, enforced: who may import whom among this distribution's homes.

Homes (product code only): ``verl.ascend`` (Ascend backend), ``verl.cpu`` (CPU backend), ``verl_ascend``
(the neutral toolkit: report, checks, run, seams) and ``recipe`` (``recipe.dapo_ascend``). Imports run one way:
recipe -> toolkit <- backends: a recipe reaches a backend only through the toolkit's launch, which calls the platform
of ``trainer.device`` (``verl_ascend.device``), so a second recipe copies nothing device-specific.

Rules, checked on every ``import``/``from ... import`` of every product module, those inside functions included
(parsed with ``ast``, nothing is imported):

- ``verl.ascend`` imports neither ``verl.cpu`` nor ``recipe``;
- ``verl.cpu`` imports neither ``verl.ascend`` nor ``recipe``;
- ``verl_ascend`` imports none of ``verl.ascend``, ``verl.cpu``, ``recipe``;
- ``recipe`` imports neither ``verl.ascend`` nor ``verl.cpu`` (no backend internals in a recipe);
- no import cycle between modules, through any import: at module top level or inside a function (a lazy
  import hides a circle from Python, not from the reader), and no cycle between the homes (here the toolkit
  counts as its rooms ``report``, ``checks``, ``run``, ``seams``, ``cluster``, ``cli`` (the command table and the parser
  every command builds) and ``checks.exits`` (the exit-status table every command returns from: a leaf that
  imports nothing, so the commands of every room, ``cli`` included, may read it).

String hand-overs (``runpy.run_module``, ``importlib.import_module``, entry points) are not imports. The
sanctioned ones, each a registration by the owner or a launch as a user starts it:

- ``verl/ascend/accept/run_check.py`` and ``cli.py`` -> subprocesses ``python -m verl_ascend train`` and
  ``python -m verl_ascend assets`` (the acceptance run launches the recipe as a user does);
- ``verl_ascend/cli.py``: each command's ``module:function``, imported when that command runs (the homes own
  their commands; the table only lists them);
- entry points of group ``verl_ascend.checks`` (setup.py): ``verl.ascend.env.rules:register_checks`` and
  ``recipe.dapo_ascend.checks:register_checks``, loaded by ``verl_ascend.checks.rules()``.
- entry points of group ``verl_ascend.seams`` (setup.py): each home's ``seams:SEAMS`` (its seam rows), loaded
  by ``verl_ascend.seams.index.assembled()``, and the rows' ``install`` paths, run by ``verl_ascend.seams.install``.
- entry points of group ``verl_ascend.recipes`` (setup.py): a recipe's launch declaration (``main_dapo:RECIPE``),
  loaded by ``verl_ascend.launch.recipe.registered_recipe()``;
- entry points of group ``verl_ascend.sections`` (setup.py): each home's config sections (``Section`` subclasses,
  one declaration per key), loaded by ``verl_ascend.sections.declared()``.
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT_ROOTS = ("verl/ascend", "verl/cpu", "verl_ascend", "recipe/dapo_ascend")
HOMES = ("verl.ascend", "verl.cpu", "verl_ascend", "recipe")
# For the cycle check the toolkit counts as its rooms: report, checks, run, seams, launch, cluster, cli and the exit table may
# not lean on each other both ways (the longest prefix first: checks.exits before checks).
ROOMS = ("verl.ascend", "verl.cpu", "verl_ascend.report", "verl_ascend.checks.exits", "verl_ascend.checks",
         "verl_ascend.run", "verl_ascend.seams", "verl_ascend.cli", "verl_ascend.launch", "verl_ascend.cluster",
         "verl_ascend", "recipe")
FORBIDDEN = {
    "verl.ascend": ("verl.cpu", "recipe"),
    "verl.cpu": ("verl.ascend", "recipe"),
    "verl_ascend": ("verl.ascend", "verl.cpu", "recipe"),
    "recipe": ("verl.ascend", "verl.cpu"),
}


def home_of(module: str, homes: tuple[str, ...] = HOMES) -> str | None:
    for home in homes:
        if module == home or module.startswith(home + "."):
            return home
    return None


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(root: Path, path: Path, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module top level) for each import in ``path``; ``from a import b``
    counts as an import of ``a.b`` when that is a module of ours, else of ``a``."""
    module = module_name(root, path)
    tree = ast.parse(path.read_text(), str(path))
    top = set(map(id, tree.body))
    # statements directly under a top-level if/try (e.g. TYPE_CHECKING guards excluded below) still run at import
    for node in tree.body:
        if isinstance(node, (ast.Try, ast.If)):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for child in ast.walk(node):
                top.add(id(child))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, node.lineno, id(node) in top))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in known else target, node.lineno, id(node) in top))
    return found


def scan(root: Path, roots=PRODUCT_ROOTS) -> dict[str, tuple[Path, list[tuple[str, int, bool]]]]:
    files = [p for r in roots if (root / r).is_dir() for p in sorted((root / r).rglob("*.py"))]
    known = {module_name(root, p) for p in files}
    return {module_name(root, p): (p, imports_of(root, p, known)) for p in files}


def violations(root: Path, roots=PRODUCT_ROOTS) -> list[str]:
    found = []
    for module, (path, imports) in scan(root, roots).items():
        home = home_of(module)
        for target, line, _top in imports:
            if home_of(target) in FORBIDDEN.get(home, ()):
                found.append(f"{path.relative_to(root)}:{line}: {home} imports {target}")
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def module_cycles(root: Path, roots=PRODUCT_ROOTS, top_only: bool = False) -> list[list[str]]:
    """Cycles among our modules through every import, those inside functions included (``top_only``: only
    the ones at module top level). A package's import of its own submodule and a submodule's import of its
    parent package are how packages work, not cycles."""
    scanned = scan(root, roots)
    graph: dict[str, set[str]] = defaultdict(set)
    for module, (_path, imports) in scanned.items():
        for target, _line, top in imports:
            if (top_only and not top) or target == module:
                continue
            # the longest module of ours that the import names
            while target and target not in scanned:
                target = target.rpartition(".")[0]
            if not target or target == module or module.startswith(target + "."):
                continue
            graph[module].add(target)
    return _cycles(graph)


def home_cycles(root: Path, roots=PRODUCT_ROOTS) -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, (_path, imports) in scan(root, roots).items():
        for target, _line, _top in imports:
            a, b = home_of(module, ROOMS), home_of(target, ROOMS)
            if a and b and a != b:
                graph[a].add(b)
    return _cycles(graph)


# ----------------------------------------------------------------------------- the rules, on this tree
def test_no_import_against_the_floor_plan():
    assert violations(REPO) == []


def test_no_module_import_cycle_even_through_function_level_imports():
    assert module_cycles(REPO) == []


def test_no_cycle_between_homes():
    assert home_cycles(REPO) == []


def test_the_scan_sees_the_product_code():
    scanned = scan(REPO)
    assert {"verl.ascend.plugin", "verl.cpu.plugin", "verl_ascend.checks", "recipe.dapo_ascend.main_dapo"} <= set(scanned)
    # imports inside functions are seen too: the launch imports the dry run lazily
    assert any(t == "verl_ascend.launch.commands" and not top for t, _l, top in scanned["verl_ascend.launch"][1])


# ----------------------------------------------------------------------------- the checker catches violations
def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_checker_reports_a_wrong_way_import_even_inside_a_function(tmp_path):
    _write(tmp_path, {
        "verl/ascend/__init__.py": "",
        "verl/ascend/bad.py": "def f():\n    from recipe.dapo_ascend import trainer\n",
        "verl/cpu/__init__.py": "",
        "verl/cpu/bad.py": "from ..ascend import bad\n",  # relative import, resolved
        "verl_ascend/__init__.py": "",
        "verl_ascend/ok.py": "import json\nimport verl.utils\n",
        "verl_ascend/bad.py": "import verl.cpu.bad\n",
        "recipe/dapo_ascend/__init__.py": "",
        "recipe/dapo_ascend/trainer.py": "import verl.ascend.bad, verl.cpu.bad, verl_ascend.ok\n",
    })
    found = violations(tmp_path)
    assert found == [
        "verl/ascend/bad.py:2: verl.ascend imports recipe.dapo_ascend.trainer",
        "verl/cpu/bad.py:1: verl.cpu imports verl.ascend.bad",
        "verl_ascend/bad.py:1: verl_ascend imports verl.cpu.bad",
        "recipe/dapo_ascend/trainer.py:1: recipe imports verl.ascend.bad",
        "recipe/dapo_ascend/trainer.py:1: recipe imports verl.cpu.bad",
    ]


def test_checker_reports_cycles(tmp_path):
    _write(tmp_path, {
        "recipe/dapo_ascend/__init__.py": "",
        "recipe/dapo_ascend/a.py": "from recipe.dapo_ascend.b import x\n",
        "recipe/dapo_ascend/b.py": "from recipe.dapo_ascend import a\nx = 1\n",
        "recipe/dapo_ascend/c.py": "def f():\n    from recipe.dapo_ascend import d\n",  # lazy: still a cycle
        "recipe/dapo_ascend/d.py": "from recipe.dapo_ascend import c\n",
        "verl_ascend/__init__.py": "",
        "verl_ascend/run.py": "def f():\n    import recipe.dapo_ascend.a\n",  # lazy, but homes still cycle
        "verl/cpu/__init__.py": "",
    })
    assert module_cycles(tmp_path, top_only=True) == [["recipe.dapo_ascend.a", "recipe.dapo_ascend.b"]]
    assert sorted(module_cycles(tmp_path)) == [["recipe.dapo_ascend.a", "recipe.dapo_ascend.b"],
                                               ["recipe.dapo_ascend.c", "recipe.dapo_ascend.d"]]
    _write(tmp_path, {"recipe/dapo_ascend/e.py": "import verl_ascend.run\n"})
    assert home_cycles(tmp_path) == [["recipe", "verl_ascend.run"]]
    rooms = tmp_path / "rooms"  # two rooms of the toolkit leaning on each other
    _write(rooms, {"verl_ascend/__init__.py": "", "verl_ascend/checks/__init__.py": "from verl_ascend.run import x\n",
                   "verl_ascend/run/__init__.py": "", "verl_ascend/run/x.py": "def f():\n    import verl_ascend.checks\n"})
    assert home_cycles(rooms) == [["verl_ascend.checks", "verl_ascend.run"]]


def test_checker_catches_the_circle_the_env_package_had(tmp_path):
    """The old env_profile <-> vllm_switches <-> stack circle, through private names imported inside functions."""
    _write(tmp_path, {
        "verl/ascend/__init__.py": "",
        "verl/ascend/env/__init__.py": "",
        "verl/ascend/env/profile.py": "def evaluate():\n    from verl.ascend.env import vllm_switches\n\n"
                                      "def _select():\n    pass\n",
        "verl/ascend/env/vllm_switches.py": "from verl.ascend.env import stack\nfrom verl.ascend.env.profile import _select\n",
        "verl/ascend/env/stack.py": "def target():\n    from verl.ascend.env.profile import _select\n",
        "verl/ascend/env/table.py": "",
    })
    assert module_cycles(tmp_path, top_only=True) == []  # what the old check saw
    assert module_cycles(tmp_path) == [["verl.ascend.env.profile", "verl.ascend.env.stack", "verl.ascend.env.vllm_switches"]]
    # the layering that replaced it: table at the bottom, every import one way
    _write(tmp_path, {"verl/ascend/env/vllm_switches.py": "from verl.ascend.env import stack, table\n",
                      "verl/ascend/env/stack.py": "from verl.ascend.env.table import select\n",
                      "verl/ascend/env/profile.py": "from verl.ascend.env import table, vllm_switches\n"})
    assert module_cycles(tmp_path) == []
