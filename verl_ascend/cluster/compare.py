"""Compare what the nodes reported: the driver's view is the reference, and every difference is a cell.

Why the driver's view: the launch validated the config, the model and the data on the driver, and the
driver's shell is where a user sets the variables of the job; a node that sees something else runs a
different job. Where the driver has no view (a variable only some nodes have, a device fact), the head
node's value is the reference, else the value most nodes share, so one odd node is the one named.
Pure functions on plain dicts: tested without Ray (``tests/verl_ascend/cluster/test_compare.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from verl_ascend.cluster import cells
from verl_ascend.cluster.job import Job

UNSET = "<unset>"


def differences(reference: Mapping[str, str], seen: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(key, seen, expected) for every key whose value differs, a key missing on either side included."""
    keys = sorted(set(reference) | set(seen))
    return [(k, seen.get(k, UNSET), reference.get(k, UNSET)) for k in keys if seen.get(k) != reference.get(k)]


def _listing(diffs, limit: int = 4) -> tuple[str, str]:
    shown = diffs[:limit]
    more = f" (+{len(diffs) - limit} more)" if len(diffs) > limit else ""
    seen = "; ".join(f"{k} {v}" if k else v for k, v, _ in shown) + more
    expected = "; ".join(f"{k} {e}" if k else e for k, _, e in shown)
    return seen, expected


def stack_cell(reference: Mapping[str, str], seen: Mapping[str, str]) -> cells.Cell:
    """Package versions (and where each was found) against the driver's."""
    diffs = [(k, v, e) for k, v, e in differences(_versions(reference), _versions(seen))]
    if not diffs:
        return cells.ok("stack", f"{len(seen)} packages as on the driver", packages=len(seen))
    where = {k: seen.get(k, "") for k, _, _ in diffs}
    detail, expected = _listing([(k, where[k] or UNSET, reference.get(k, UNSET)) for k, _, _ in diffs])
    names = " ".join(f"{k}=={_version(reference[k])}" for k, _, _ in diffs if k in reference and k != "python")
    fix = (f"install the driver's versions on this node (pip install {names})" if names else
           "install the same Python on every node") + "; or remove what shadows them there (a PYTHONPATH entry, a second site-packages)"
    return cells.fail("stack", detail, f"{expected} (the driver's)", fix)


def _version(described: str) -> str:
    return described.split(" (", 1)[0]


def _versions(described: Mapping[str, str]) -> dict[str, str]:
    return {k: _version(v) for k, v in described.items()}


def env_cell(job: Job, seen: Mapping[str, str], majority: Mapping[str, str | None], ref_name: str) -> cells.Cell:
    """The watched variables a node's workers receive, against what the job exports, the driver's shell and,
    for a variable the driver does not set, the value most nodes have (``majority``, :func:`env_majority`)."""
    exported = job.exported
    problems = []
    for name, value in sorted(exported.items()):
        if seen.get(name) != value:
            problems.append((name, seen.get(name, UNSET), value, "exported by the job's runtime_env"))
    for name, value in sorted(job.driver_env.items()):
        if name not in exported and seen.get(name) != value:
            problems.append((name, seen.get(name, UNSET), value, "set in the driver's shell, not exported"))
    for name, value in sorted(majority.items()):
        if name not in exported and name not in job.driver_env and seen.get(name) != value:
            problems.append((name, seen.get(name, UNSET), UNSET if value is None else value, f"as on {ref_name}"))
    if not problems:
        return cells.ok("env", f"{len(seen)} watched variables as the driver and the job's runtime_env give them")
    detail = "; ".join(f"{n}={v}" for n, v, _, _ in problems[:4]) + (f" (+{len(problems) - 4} more)" if len(problems) > 4 else "")
    expected = "; ".join(f"{n}={e} ({why})" for n, _, e, why in problems[:4])
    names = ", ".join(n for n, *_ in problems[:4])
    fix = (f"nodes started with `ray start` keep their own environment: export {names} in this node's shell before "
           f"`ray start` (as on the others), or give it to every worker: +ray_kwargs.ray_init.runtime_env.env_vars.NAME=VALUE")
    return cells.fail("env", detail, expected, fix)


def env_majority(views: Mapping[str, Mapping[str, str]], head: str | None) -> dict[str, str | None]:
    """Per watched variable any node has: the value the head has (None: unset there), else the most common one."""
    names = {n for env in views.values() for n in env}
    if head in views:
        return {name: views[head].get(name) for name in names}
    return {name: Counter(env.get(name) for env in views.values()).most_common(1)[0][0] for name in names}


def files_cell(reference: Mapping[str, Mapping[str, str]], seen: Mapping[str, Mapping[str, str]]) -> cells.Cell:
    """Model folders and datasets against the driver's: present, same config/tokenizer hashes, same sizes."""
    problems = []
    for what in sorted(reference):
        mine, theirs = seen.get(what, {"": "missing"}), reference[what]
        if "" in mine and "" not in theirs:  # missing / unreadable here, fine on the driver
            problems.append((what, mine[""], "present as on the driver"))
            continue
        for key, value, expected in differences(theirs, mine):
            problems.append((f"{what}/{key}" if key else what, value, expected))
    if not problems:
        return cells.ok("files", f"{len(reference)} model folders and datasets as on the driver")
    detail, expected = _listing(problems)
    fix = ("copy the model folder and datasets to the same paths on every node (rsync -a from the driver's), "
           "or put them on storage every node mounts at that path")
    return cells.fail("files", detail, expected + " (the driver's)", fix)


def same_cell(column: str, what: str, reference: Mapping[str, str], seen: Mapping[str, str], ref_name: str) -> cells.Cell:
    """A device fact (CANN version, npu-smi's driver version, TLS switches) against the reference node's."""
    diffs = differences(reference, seen)
    if not diffs:
        return cells.ok(column, f"{what} as on {ref_name}")
    detail, expected = _listing(diffs)
    return cells.fail(column, f"{what}: {detail}", f"{expected} (as on {ref_name})",
                      f"make {what} the same on every node (the reference is {ref_name})")


def device_slots(job: Job, resource: str, have: float) -> cells.Cell:
    """Ray's accelerator slots on a node against the ranks the job places there (``n_gpus_per_node``)."""
    line = f"Ray {resource} slots {have:g}, trainer.n_gpus_per_node={job.gpus_per_node}"
    if have < job.gpus_per_node:
        return cells.fail("devices", line, f"at least {job.gpus_per_node} {resource} slots",
                          f"start this node's Ray with its {resource}s visible (ray start --resources / --num-gpus), or lower "
                          "trainer.n_gpus_per_node", slots=have)
    return cells.ok("devices", line, slots=have)


RESUME = ("each node writes its ranks' shards to its own disk: after a node is lost its shards are gone, a restart "
          "whose ranks land on other nodes finds no checkpoint (or only the tracker, on the node of rank 0), and nodes "
          "may resume different steps")


def checkpoint_cells(job: Job, writes: Mapping[str, dict], seen: Mapping[str, list[str]], labels: Mapping[str, str],
                     reference: str) -> dict[str, cells.Cell]:
    """Per node: the folder writable, shared (the tokens of the other nodes read back there), room for one checkpoint.

    ``writes``: node id -> :func:`probe.write_token`'s record; ``seen``: node id -> ids whose token it read back;
    ``reference``: the node whose storage counts as the job's (the driver's node: rank 0's tracker file lands there)."""
    wrote = {n for n, w in writes.items() if w.get("wrote")}
    ref = reference if reference in wrote else None
    out = {}
    for node, record in writes.items():
        folder = job.checkpoint_dir
        if not record.get("wrote"):
            out[node] = cells.fail("checkpoint", f"cannot write in {folder}: {record.get('error')}", "a writable folder",
                                   "create the folder with write access for the job's user on this node (trainer.default_local_dir)")
            continue
        missing = _not_shared(node, ref, wrote, seen)
        if missing:
            names = ", ".join(sorted(labels[n] for n in missing))
            out[node] = cells.fail(
                "checkpoint", f"{folder} is node-local: not the folder {names} writes (a token written on one is not read "
                f"back on the other); {RESUME}",
                "one folder shared by every node (a token written on one node read back on all)",
                "point trainer.default_local_dir at storage every node mounts (NFS, a parallel file system) at the same path")
            continue
        out[node] = _room(job, record)
    return out


def _not_shared(node: str, ref: str | None, wrote: set[str], seen: Mapping[str, list[str]]) -> list[str]:
    """The nodes whose folder ``node``'s is not: the reference's storage is the job's, so only a node that does
    not share it is named (not the reference too); without a reference, every node whose token it missed."""
    if ref is None:
        return [n for n in wrote if n != node and n not in seen.get(node, [])]
    if node == ref:
        return []
    return [ref] if ref not in seen.get(node, []) or node not in seen.get(ref, []) else []


def _room(job: Job, record: dict) -> cells.Cell:
    free = record.get("free", 0)
    need = job.checkpoint_bytes
    return cells.capacity("checkpoint", f"{job.checkpoint_dir}: shared, {free / 2**30:.1f} GiB free", free, need,
                          f"{(need or 0) / 2**30:.2f} GiB for one checkpoint",
                          " (checkpoint size unknown: no safetensors in the model folder)",
                          "free space there, or move trainer.default_local_dir to a larger file system")


def no_answer(timeout_s: float, why: str) -> cells.Cell:
    return cells.fail("node", f"no answer within {timeout_s:g} s: {why}", "the node's check task answering",
                      "look at this node: `ray status`, its raylet log (/tmp/ray/session_latest/logs/raylet.out), "
                      "whether the host is hung or out of memory; restart its Ray (ray stop; ray start --address=HEAD)")
