"""The registry of this distribution's own environment variables, and the one way to read them.

The NPU runtime's variables (HCCL_*, TASK_QUEUE_ENABLE, ...) are decided by the Ascend env profile
(``verl/ascend/env/profile.yaml``, with roles, conflicts and reasons); the registry is for the
variables *we* define: switches, paths and the wire formats between our own processes.

Each home declares its own variables next to its code, as a tuple ``VARIABLES`` of :class:`EnvVar`
in a module that imports nothing but this one (``verl/ascend/envs.py``, ``verl/cpu/envs.py``,
``recipe/dapo_ascend/envs.py``; the toolkit's own are :data:`VARIABLES` below), registered in the
entry-point group ``verl_ascend.envs`` (setup.py). This module keeps the mechanism: the row type,
the assembly (:func:`declared`), the lookups (:func:`raw`, :func:`flag`, :func:`number`), the one
boolean parser (:func:`parse_bool`: ``DRY_RUN=no`` and ``VERL_ASCEND_DOCTOR=off`` mean what they say
everywhere, and an unreadable value names the variable and what would be accepted) and the listing.
Every name read anywhere in this distribution is declared by some home (``tests/verl_ascend/test_envs.py``
scans the code).

``verl-ascend envs`` prints every variable with the value set in this shell; ``--markdown``
prints the table that ``docs/architecture.md`` shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

ENTRY_POINT_GROUP = "verl_ascend.envs"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


class EnvValueError(ValueError):
    """An environment variable of ours holds a value we cannot read."""


@dataclass(frozen=True)
class EnvVar:
    name: str
    kind: str  # "bool" | "int" | "float" | "path" | "str" | "wire" (written by us for our own processes)
    default: str | None
    read_by: str  # the file that reads it, in the home that declares it
    doc: str


# The toolkit's own variables (checks, run machinery, RunPaths); the other homes declare theirs.
VARIABLES: tuple[EnvVar, ...] = (
    EnvVar("DRY_RUN", "bool", "0", "verl_ascend/launch/__init__.py",
           "Compose the job, print the effective settings and the checks' verdict, exit without starting Ray."),
    EnvVar("VERL_ASCEND_MEMORY_CACHE", "path", "~/.cache/verl-ascend/memory", "verl_ascend/memory/train_trace.py",
           "Folder of the memory plan's traced training peaks, keyed by shape and package versions (0: no cache)."),
    EnvVar("VERL_ASCEND_DOCTOR", "bool", "1", "verl_ascend/launch/__init__.py",
           "Run the checks before a job starts (0 skips them; refusals of preflight still apply)."),
    EnvVar("VERL_ASCEND_DOCTOR_STRICT", "bool", "0", "verl_ascend/checks/__init__.py",
           "Treat the checks' warnings as errors (refuse the start)."),
    EnvVar("VERL_ASCEND_DOCTOR_IGNORE", "str", "", "verl_ascend/checks/__init__.py",
           "Comma-separated rule ids whose findings are not reported."),
    EnvVar("VERL_ASCEND_CLUSTER_NNODES", "int", None, "verl_ascend/checks/rules_async.py",
           "Nodes of the cluster a launch script starts on (its NNODES): separate_async's two pools must fit them."),
    # -- paths ------------------------------------------------------------------------------------
    EnvVar("VERL_ASCEND_OUTPUT_DIR", "path", "outputs", "verl_ascend/paths.py",
           "Root of a run's files: <dir>/<experiment>/metrics.jsonl, checkpoints, profiles."),
    # -- wire formats between our own processes (set by us, read by us) ---------------------------
    EnvVar("VERL_ASCEND_RUN_DIR", "wire", None, "verl_ascend/run/files.py",
           "The run's folder, exported by the driver to the trainer process."),
    EnvVar("VERL_ASCEND_METRICS_APPEND", "wire", None, "verl_ascend/run/files.py",
           "Set by the driver when a resumed run must append to (not truncate) metrics.jsonl."),
    EnvVar("VERL_ASCEND_FRESH_DATA_ORDER", "wire", None, "verl_ascend/run/data_order.py",
           "Set by the driver (1) when fault_tolerance.new_data_order starts a fresh data order on resume."),
    EnvVar("VERL_ASCEND_RUN_TOKEN", "wire", None, "verl_ascend/run/guardian.py",
           "Set by the driver before Ray starts, fresh per run: marks every process of the run, which its guardian "
           "kills when the driver dies."),
)


def parse_bool(name: str, text: str | bool) -> bool:
    """THE boolean parser: 1/true/yes/on and 0/false/no/off/'' (any case); anything else names ``name``.

    Also used for config values read as switches (a YAML bool passes through)."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise EnvValueError(f"{name}={text!r} is not a boolean: expected one of {', '.join(TRUE_WORDS)} or {', '.join(w for w in FALSE_WORDS if w)}")


# ------------------------------------------------------------------------------------ assembly
REINSTALL = "the installed entry points may be older than setup.py: reinstall with `pip install --no-deps -e .`"
_declared: Optional[dict[str, EnvVar]] = None


def declared() -> dict[str, EnvVar]:
    """Every home's variables by name, from the entry-point group ``verl_ascend.envs``, once per process.

    Each entry point names a home's ``VARIABLES`` in a module that imports nothing but this one, so
    assembling never runs a home's code (a lookup made while a home is being imported finds them too).
    """
    global _declared
    if _declared is None:
        from importlib.metadata import entry_points

        found: dict[str, EnvVar] = {}
        homes = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
        if not homes:  # metadata older than setup.py: every other home's variable would look unknown
            raise RuntimeError(f"no variables in the entry-point group {ENTRY_POINT_GROUP}; {REINSTALL}")
        for ep in homes:
            for spec in ep.load():
                if not isinstance(spec, EnvVar):
                    raise TypeError(f"{ep.value}: entry points of {ENTRY_POINT_GROUP} must name tuples of EnvVar")
                if spec.name in found and found[spec.name] != spec:
                    raise ValueError(f"{spec.name} is declared twice ({found[spec.name].read_by}, {spec.read_by})")
                found[spec.name] = spec
        _declared = found
    return _declared


def _spec(name: str) -> EnvVar:
    for spec in VARIABLES:  # the toolkit's own: no entry point to load (the offline report reads these)
        if spec.name == name:
            return spec
    try:
        return declared()[name]
    except KeyError:
        raise KeyError(f"{name} is not a registered variable of verl-ascend (no home declares it: the "
                       f"entry-point group {ENTRY_POINT_GROUP}, verl_ascend/envs.py)") from None


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The text set for ``name``, or its registered default (None when it has none)."""
    spec = _spec(name)
    environ = os.environ if environ is None else environ
    return environ.get(name, spec.default)


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A registered boolean variable; unset without a default means False."""
    spec = _spec(name)
    if spec.kind != "bool":
        raise TypeError(f"{name} is registered as {spec.kind}, not bool")
    text = raw(name, environ)
    return False if text is None else parse_bool(name, text)


def number(name: str, environ: Mapping[str, str] | None = None) -> int | float | None:
    """A registered int/float variable (None when unset without a default)."""
    spec = _spec(name)
    text = raw(name, environ)
    if text is None:
        return None
    cast = {"int": int, "float": float}[spec.kind]
    try:
        return cast(text)
    except ValueError:
        raise EnvValueError(f"{name}={text!r}: expected a{'n integer' if cast is int else ' number'}") from None


def markdown_table() -> str:
    """The docs' table of our own variables: name, kind, default, what it does, the home that declares it."""
    rows = ["| variable | kind | default | what it does | declared in |", "|---|---|---|---|---|"]
    for spec in declared().values():
        default = "" if spec.default is None else f"`{spec.default}`" if spec.default else "(empty)"
        rows.append(f"| `{spec.name}` | {spec.kind} | {default} | {spec.doc} | `{spec.read_by}` |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """``verl-ascend envs``: every variable, with name, kind, the value in this shell (or the default) and
    what it does; ``--markdown``: the docs' table instead."""
    from verl_ascend.checks.exits import OK
    from verl_ascend.cli import parser  # here, not at the top: every home's envs module imports this one

    p = parser("envs", "The environment variables verl-ascend reads, with the value each has in this shell.",
               ["verl-ascend envs --markdown   # the table docs/architecture.md shows"])
    p.add_argument("--markdown", action="store_true", help="print the docs' table instead")
    if p.parse_args(argv).markdown:
        print(markdown_table())
        return OK
    for spec in declared().values():
        value = os.environ.get(spec.name)
        shown = f"{value!r} (set)" if value is not None else f"{spec.default!r} (default)"
        print(f"{spec.name:34} {spec.kind:6} {shown:28} {spec.doc}")
    return OK
