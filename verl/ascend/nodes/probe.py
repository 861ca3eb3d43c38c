"""The Ascend backend's probes of one node for ``verl-ascend cluster`` (``AscendPlatform.cluster_probe``).

What it adds to the toolkit's neutral probes, per node:

- **stack**: the stack gate's verdict (:func:`verl.ascend.env.stack_gate.verdict`) and the CANN version,
  the latter compared across nodes;
- **devices**: ``npu-smi info`` (cards, health, driver version compared across nodes);
  ``ASCEND_RT_VISIBLE_DEVICES`` against the cards npu-smi lists, Ray's ``NPU`` slots of this node and
  ``trainer.n_gpus_per_node``; under ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES`` the
  logical-to-physical mapping (:func:`tools.noset_mapping_problem`);
- **links**: per visible card, ``hccn_tool -i N -link -g`` (UP), ``-tls -g`` (one TLS switch on every card
  and node: CANN's ``EI0006`` socket timeouts of vllm-ascend #5461 / #9447) and ``-ip -g`` (the cards' NIC
  addresses in one subnet, as Atlas 800T A2 requires).

A tool that is not on this node (a CPU host, the emulator) gives a ``skip`` cell that says what it would
have checked. Runs inside the check's Ray actor on the node; imports no torch_npu.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from verl.ascend.nodes import tools
from verl_ascend.cluster import cells
from verl_ascend.envs import parse_bool

NOSET = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
TOOL_HOMES = {"npu-smi": ("/usr/local/sbin", "/usr/local/bin"), "hccn_tool": ("/usr/local/Ascend/driver/tools",)}
TOOL_TIMEOUT_S = 15


def find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for home in TOOL_HOMES.get(name, ()):
        path = os.path.join(home, name)
        if os.access(path, os.X_OK):
            return path
    return None


def run_tool(path: str, *args: str) -> str:
    """The tool's stdout; an OSError or a non-zero exit is a RuntimeError naming the command."""
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{os.path.basename(path)} {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{os.path.basename(path)} {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def stack_cells(environ) -> tuple[list[cells.Cell], dict]:
    from verl.ascend.env.stack_gate import cann_version, verdict

    checks = verdict(environ)
    cann = cann_version(environ)
    same = {"CANN": cann[0] if cann else "none"}
    bad = [c.line for c in checks if not c.ok]
    if bad:
        return [cells.fail("stack", "stack gate: " + "; ".join(bad[:3]) + (f" (+{len(bad) - 3})" if len(bad) > 3 else ""),
                           "the pinned NPU stack (verl-ascend stack-gate)", "on this node: verl-ascend stack-gate, then "
                           "install what each MISMATCH line names")], same
    return [cells.ok("stack", f"stack gate: {len(checks)} checks ok, CANN {same['CANN']}")], same


def device_cells(job, environ, npu_slots: float | None) -> tuple[list[cells.Cell], dict]:
    """npu-smi's cards and health, the visible list, Ray's slots, n_gpus_per_node, the NOSET mapping."""
    smi = find_tool("npu-smi")
    if smi is None:
        return [cells.skip("devices", "npu-smi not on this node: would check the card count and health of every NPU, "
                           "the driver version on every node, ASCEND_RT_VISIBLE_DEVICES against the cards, Ray's NPU "
                           "slots and trainer.n_gpus_per_node, and the logical->physical mapping under NOSET")], {}
    try:
        version, cards = tools.parse_npu_smi(run_tool(smi, "info"))
        visible = tools.parse_visible(environ.get("ASCEND_RT_VISIBLE_DEVICES"))
        noset = parse_bool(NOSET, environ.get(NOSET, ""))
    except (RuntimeError, ValueError) as exc:
        return [cells.fail("devices", str(exc), "npu-smi info answering, a readable visible-devices list",
                           "check the NPU driver on this node (npu-smi info)")], {}
    ids = [c.npu for c in cards]
    used = visible if visible is not None else ids
    out = []
    unknown = [d for d in used if d not in ids]
    sick = [f"{c.npu} {c.health}" for c in cards if c.npu in used and c.health.upper() != "OK"]
    need = job.gpus_per_node
    if unknown:
        out.append(cells.fail("devices", f"ASCEND_RT_VISIBLE_DEVICES names cards {unknown} npu-smi does not list ({ids})",
                              "visible ids among the node's cards", "fix ASCEND_RT_VISIBLE_DEVICES before `ray start` on this node"))
    if sick:
        out.append(cells.fail("devices", f"cards not healthy: {', '.join(sick)}", "Health OK on every card the job uses",
                              "npu-smi info -t health -i <id> for the cause; exclude the card or repair the node"))
    if len(used) < need or (npu_slots is not None and npu_slots < need):
        out.append(cells.fail("devices", f"{len(used)} visible cards, Ray NPU slots {npu_slots}, n_gpus_per_node={need}",
                              f"at least {need} visible cards and Ray NPU slots", "expose the node's cards to Ray "
                              "(ASCEND_RT_VISIBLE_DEVICES before ray start), or lower trainer.n_gpus_per_node"))
    if noset:
        problem = tools.noset_mapping_problem(visible)
        if problem:
            out.append(cells.fail("devices", f"{NOSET}=1: {problem}", "ASCEND_RT_VISIBLE_DEVICES unset or 0..n-1",
                                  f"unset {NOSET} (Ray then sets each worker's list), or make this node's list 0..n-1 "
                                  "(verl PR #7507)"))
    if not out:
        out.append(cells.ok("devices", f"{len(cards)} cards, {len(used)} visible {used}, health OK, driver {version}"))
    return out, {"npu-smi version": version or "unknown", "card model": ",".join(sorted({c.name for c in cards}))}


def link_cells(environ) -> tuple[list[cells.Cell], dict]:
    """Per card the job sees: link UP, one TLS switch, NIC addresses in one subnet."""
    hccn = find_tool("hccn_tool")
    if hccn is None:
        return [cells.skip("links", "hccn_tool not on this node: would check per card `hccn_tool -i N -link -g` (UP), "
                           "`-tls -g` (the same TLS switch on every card and node) and `-ip -g` (one subnet)")], {}
    try:
        smi = find_tool("npu-smi")
        ids = tools.parse_visible(environ.get("ASCEND_RT_VISIBLE_DEVICES"))
        if ids is None:
            ids = [c.npu for c in tools.parse_npu_smi(run_tool(smi, "info"))[1]] if smi else list(range(8))
        link = {d: tools.parse_link(run_tool(hccn, "-i", str(d), "-link", "-g")) for d in ids}
        tls = {d: tools.parse_tls(run_tool(hccn, "-i", str(d), "-tls", "-g")) for d in ids}
        nic = {d: tools.parse_ip(run_tool(hccn, "-i", str(d), "-ip", "-g")) for d in ids}
    except (RuntimeError, ValueError) as exc:
        return [cells.fail("links", str(exc), "hccn_tool answering for every card", "check the NPU driver and NICs")], {}
    return judge_links(link, tls, nic)


def judge_links(link: dict, tls: dict, nic: dict) -> tuple[list[cells.Cell], dict]:
    """The link cells from parsed per-card values (card id -> value), and the facts compared across nodes."""
    out = []
    down = [d for d, state in link.items() if state != "UP"]
    if down:
        out.append(cells.fail("links", f"link not UP on cards {down} ({', '.join(f'{d}: {link[d]}' for d in down)})",
                              "link status UP on every card", "hccn_tool -i N -link -g; check the cable and switch port"))
    switches = sorted({str(v) for v in tls.values()})
    if len(switches) > 1:
        out.append(cells.fail("links", f"TLS switch differs between cards: {tls}", "one TLS switch on every card",
                              "hccn_tool -i N -tls -s enable 0 (or 1) on every card of every node"))
    subnets = {d: str(i.network) if i else None for d, i in nic.items()}
    if None in subnets.values() or len(set(subnets.values())) > 1:
        out.append(cells.fail("links", f"card NICs not in one subnet: {subnets}", "every card's NIC address in one subnet",
                              "hccn_tool -i N -ip -s address A netmask M on each card (Atlas 800T A2: one subnet)"))
    if not out:
        out.append(cells.ok("links", f"{len(link)} cards UP, TLS switch {switches[0] if switches else '?'}, "
                            f"subnet {next(iter(subnets.values()), '?')}"))
    masks = sorted({str(i.netmask) for i in nic.values() if i})
    return out, {"TLS switch": ",".join(switches), "netmask": ",".join(masks)}


def probe(job, environ=None) -> dict:
    """``AscendPlatform.cluster_probe``: the cells and cross-node facts of this node."""
    environ = os.environ if environ is None else environ
    out, same = [], {}
    for column, (made, facts) in (("stack", stack_cells(environ)), ("devices", device_cells(job, environ, _npu_slots())),
                                  ("links", link_cells(environ))):
        out += made
        if facts:
            same[column] = facts
    return {"cells": out, "same": same}


def _npu_slots() -> float | None:
    """Ray's NPU slots of the node this actor runs on (None outside Ray)."""
    try:
        import ray

        here = ray.get_runtime_context().get_node_id()
        return next(n["Resources"].get("NPU", 0.0) for n in ray.nodes() if n["NodeID"] == here)
    except Exception:  # noqa: BLE001 - not in a Ray worker: the slot count is not judged
        return None
