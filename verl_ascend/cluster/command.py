"""``verl-ascend cluster``: prove every node of a running Ray cluster ready for a job before it loads anything.

Run on the head node, for the config the job will run (Hydra overrides appended, as ``verl-ascend
dry-run``). It composes the config, lets the device prepare and deliver it exactly as the launch does
(so the workers' ``runtime_env`` is the job's), then places one actor on every alive node
(``NodeAffinitySchedulingStrategy``, no CPU reserved) and runs four bounded rounds:

1. observe: each node's facts and own cells (:mod:`probe`), the device's probes (``DeviceHooks.cluster_probe``),
   and a token written into the checkpoint folder;
2. read back: which nodes' tokens each node sees (shared or node-local checkpoint folder);
3. collective: an all-reduce across every node that answered, on the job's backend (:mod:`collective`);
4. clean up: the tokens (and a checkpoint folder the check created) removed, the actors killed.

A node that does not answer a round within ``--timeout`` is named at once. Then the driver compares
(:mod:`compare`) and prints the node x check table (:mod:`table`). Exit status: 0 ready, 2 not ready
(a ``FAIL`` cell, no cluster at the address, a config that does not compose), 1 the check itself failed.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence

from verl_ascend.checks.exits import FAILED, OK, REFUSED
from verl_ascend.cluster import cells, collective, compare, probe
from verl_ascend.cluster.job import Job
from verl_ascend.cluster.table import CLUSTER_ROW, Report, text, to_json

DEFAULT_TIMEOUT_S = 30.0
COLLECTIVE_BYTES = 16 << 20
EXAMPLES = ("verl-ascend cluster --config-name dapo_qwen25_32b_npu trainer.nnodes=16 --json > cluster.json",
            "verl-ascend cluster --timeout 10 +ray_kwargs.ray_init.address=10.0.0.1:6379")


class NotReady(Exception):
    """The check cannot start on this cluster (no Ray at the address, a config the device refuses): exit 2."""


# ----------------------------------------------------------------------------- on each node
class NodeAgent:
    """The check's actor on one node (wrapped by ``ray.remote`` when the check runs)."""

    def observe(self, job: Job, node_id: str, ip: str) -> dict:
        self.job, self.node_id, self.ip = job, node_id, ip
        self.record = probe.observe(job, node_id, ip)
        return self.record

    def read_tokens(self) -> list[str]:
        return probe.read_tokens(self.job)

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind((self.ip, 0))
            return s.getsockname()[1]

    def collective(self, rank: int, world: int, master: str, port: int, backend: str, device: str, timeout_s: float,
                   nbytes: int) -> dict:
        return collective.run_rank(rank, world, master, port, backend, device, timeout_s, nbytes)

    def remove_token(self) -> None:
        probe.remove_token(self.job, self.node_id)

    def remove_created(self) -> None:
        probe.remove_created(self.job, self.record["token"].get("created", ""))


# ----------------------------------------------------------------------------- the driver
def _wait(refs: dict, timeout_s: float) -> dict:
    """node -> result, or None (no answer in time), or the exception the node's call raised."""
    import ray

    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    ready = set(ready)
    out = {}
    for node, ref in refs.items():
        if ref not in ready:
            out[node] = None
            continue
        try:
            out[node] = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a node's failure becomes that node's cell
            out[node] = exc
    return out


def _wait_collective(refs: dict, timeout_s: float) -> dict:
    """Like :func:`_wait`, but done as soon as one rank fails on its own: the others can only wait for it (until
    their timeout), so they are recorded as having waited, and named as such, seconds earlier."""
    import ray

    pending, done, deadline = dict(refs), {}, time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        ready, _ = ray.wait(list(pending.values()), num_returns=1, timeout=max(deadline - time.monotonic(), 0))
        for node in [n for n, ref in pending.items() if ref in ready]:
            done.update(_wait({node: pending.pop(node)}, 0))
        if any(isinstance(r, dict) and not r["ok"] and not collective.waited(r) for r in done.values()):
            stopped = {"ok": False, "stage": "group", "error": "timed out: stopped waiting once a rank failed"}
            return {**done, **{n: dict(stopped) for n in pending}}
    return {**done, **dict.fromkeys(pending)}


def _nodes(ray) -> tuple[list[dict], list[dict], str]:
    """(alive nodes, dead nodes, the driver's node id)."""
    nodes = ray.nodes()
    here = ray.get_runtime_context().get_node_id()
    alive = sorted((n for n in nodes if n["Alive"]), key=lambda n: (n["NodeID"] != here, n["NodeManagerAddress"]))
    return alive, [n for n in nodes if not n["Alive"]], here


def run_check(job: Job, address: str, node_ip: str | None, timeout_s: float, nbytes: int) -> Report:
    """Connect, probe every alive node in bounded rounds, compare; the report (raises ``NotReady``)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from verl_ascend.device import device_hooks

    started = time.monotonic()
    notes: list[str] = []
    hooks = device_hooks(job.device)
    backend, device = hooks.cluster_collective()
    resource = hooks.cluster_resource()
    try:
        ray.init(address=address, _node_ip_address=node_ip, logging_level="ERROR", log_to_driver=False,
                 namespace=f"verl-ascend-cluster-{job.check_id}")
    except Exception as exc:  # noqa: BLE001 - no cluster there is a finding, not a crash
        raise NotReady(f"no Ray cluster at {address} ({' '.join(str(exc).split())[:200]}); start Ray on every node first "
                       "(ray start --head on this one, ray start --address=HEAD:PORT on the others)") from None
    try:
        alive, dead, here = _nodes(ray)
        labels = {n["NodeID"]: cells.node_label(n["NodeManagerAddress"], n["NodeID"] == here) for n in alive}
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in alive}
        out: list[cells.Cell] = [_cluster_size(job, alive, dead, resource)]
        out += [compare.device_slots(job, resource, n["Resources"].get(resource, 0)).at(labels[n["NodeID"]]) for n in alive]
        agent_cls = ray.remote(NodeAgent)
        agents = {n: agent_cls.options(num_cpus=0, runtime_env=job.runtime_env, max_concurrency=2,
                                       scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                  for n in ips}
        try:
            out += _rounds(job, agents, ips, labels, here, timeout_s, nbytes, (backend, device), notes)
        finally:
            for agent in agents.values():
                ray.kill(agent)
    finally:
        ray.shutdown()
    title = (f"verl-ascend cluster: {len(alive)} alive nodes for a job of {job.nnodes} nodes x {job.gpus_per_node} "
             f"(trainer.device={job.device}, collective {backend}, timeout {timeout_s:g} s)")
    made = [c for c in out if c is not None]
    return Report(title, [labels[n] for n in ips], made, [*notes, *_bandwidth(made)], wall_s=time.monotonic() - started)


def _bandwidth(made: list[cells.Cell]) -> list[str]:
    """The collective's one-line summary: the slowest node's bus bandwidth is the job's."""
    done = [c for c in made if c.check == "collective" and c.status == cells.OK]
    if not done:
        return []
    slowest = min(done, key=lambda c: c.data["bus_bytes_per_s"])
    return [f"collective: slowest bus bandwidth {slowest.data['bus_bytes_per_s'] / 1e9:.2f} GB/s on {slowest.node} "
            f"({slowest.data['bytes'] / 2**20:.0f} MiB all-reduce, {slowest.data['seconds'] * 1e3:.1f} ms)"]


def _cluster_size(job: Job, alive: list[dict], dead: list[dict], resource: str) -> cells.Cell | None:
    usable = [n for n in alive if n["Resources"].get(resource, 0) > 0]
    if len(usable) >= job.nnodes:
        return None
    gone = ", ".join(sorted({n["NodeManagerAddress"] for n in dead})) or "none"
    return cells.fail("node", f"{len(usable)} alive nodes with {resource} slots, the job places ranks on {job.nnodes} "
                      f"(nodes Ray lists as dead: {gone})", f"{job.nnodes} alive nodes",
                      "start Ray on the missing nodes (ray start --address=HEAD:PORT), or lower trainer.nnodes").at(CLUSTER_ROW)


def _rounds(job, agents, ips, labels, here, timeout_s, nbytes, comm, notes) -> list[cells.Cell]:
    """The four rounds; the cells of every node (none of a node that did not answer, beyond its own).
    ``notes`` gets each round's duration."""
    out = []
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        notes.append(f"round {name}: {now - clock:.1f} s")
        clock = now

    first = _wait({n: a.observe.remote(job, n, ips[n]) for n, a in agents.items()}, timeout_s)
    lap("observe (actor start, probes, token written)")
    answered = {n: r for n, r in first.items() if isinstance(r, dict)}
    for node, result in first.items():
        if result is None:
            out.append(compare.no_answer(timeout_s, "the check's actor on this node did not start or finish").at(labels[node]))
        elif not isinstance(result, dict):
            out.append(cells.fail("node", f"the check's actor failed here: {collective._short(result)}",
                                  "the job's runtime_env set up and the probe run on this node",
                                  "read the error: a runtime_env that cannot be built on this node (pip, working_dir), "
                                  "or verl-ascend missing from this node's Python").at(labels[node]))
    for node, record in answered.items():
        out += [cells.Cell.from_json(c).at(labels[node]) for c in record["cells"]]
    tokens = _wait({n: agents[n].read_tokens.remote() for n in answered}, timeout_s)
    lap("read back (tokens)")
    out += _compare(job, answered, tokens, labels, here)
    lap("compare (the driver's own view, cross-node)")
    out += _collective(agents, answered, ips, labels, here, timeout_s, nbytes, comm)
    lap("collective (join, all-reduce)")
    # Two rounds: on a shared folder another node's token may still be in the folder this node created.
    _wait({n: agents[n].remove_token.remote() for n in answered}, timeout_s)
    _wait({n: agents[n].remove_created.remote() for n in answered}, timeout_s)
    return out


def _compare(job, answered, tokens, labels, here) -> list[cells.Cell]:
    reference = probe.facts(job)  # the driver's own view
    envs = {n: r["facts"]["env"] for n, r in answered.items()}
    majority = compare.env_majority(envs, here)
    ref_name = labels.get(here, "the driver's node")
    out = []
    for node, record in answered.items():
        seen = record["facts"]
        label = labels[node]
        out.append(compare.stack_cell(reference["stack"], seen["stack"]).at(label))
        out.append(compare.env_cell(job, seen["env"], majority, ref_name).at(label))
        if reference["files"]:
            out.append(compare.files_cell(reference["files"], seen["files"]).at(label))
        for key, value in seen.items():
            if key.startswith("device "):
                column = key.split(" ", 1)[1]
                ref = answered.get(here, next(iter(answered.values())))["facts"].get(key, {})
                out.append(compare.same_cell(column, f"{column} facts", ref, value, ref_name).at(label))
    views = {n: (t if isinstance(t, list) else []) for n, t in tokens.items()}
    writes = {n: r["token"] for n, r in answered.items()}
    for node, cell in compare.checkpoint_cells(job, writes, views, labels, here).items():
        out.append(cell.at(labels[node]))
    return out


def _collective(agents, answered, ips, labels, here, timeout_s, nbytes, comm) -> list[cells.Cell]:
    import ray

    backend, device = comm
    if len(answered) < 2:
        return [cells.skip("collective", "fewer than two nodes answered: nothing to connect").at(labels[n]) for n in answered]
    order = sorted(answered, key=lambda n: (n != here, ips[n]))
    ranks = {n: i for i, n in enumerate(order)}
    try:
        port = ray.get(agents[order[0]].free_port.remote(), timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001
        return [cells.fail("collective", f"no free port for rank 0's store: {exc}", "a free port", "see the node's Ray logs")
                .at(labels[order[0]])]
    refs = {n: agents[n].collective.remote(ranks[n], len(order), ips[order[0]], port, backend, device, timeout_s, nbytes)
            for n in order}
    results = _wait_collective(refs, timeout_s + 15)  # the ranks give up after timeout_s; the margin lets them say why
    results = {n: (r if isinstance(r, dict) or r is None else {"ok": False, "stage": "actor", "error": collective._short(r)})
               for n, r in results.items()}
    made = collective.collective_cells(results, labels, ranks, backend, timeout_s)
    return [cell.at(labels[n]) for n, cell in made.items()]


# ----------------------------------------------------------------------------- the command
def _config(args):
    """The composed config, prepared and delivered by its device as the launch does; exits through NotReady."""
    from omegaconf import OmegaConf

    from verl_ascend.checks.preflight import PreflightError
    from verl_ascend.device import device_hooks
    from verl_ascend.run.config_utils import ConfigError, compose

    try:
        config = compose(args.config_name, args.overrides, args.config_dir)
    except ConfigError as exc:
        raise NotReady(str(exc)) from None
    device = device_hooks(str(OmegaConf.select(config, "trainer.device") or "cpu"))
    try:
        with device.evaluated_once():
            device.prepare_config(config)
            device.deliver_config(config)
    except (PreflightError, ValueError) as exc:  # the device refuses the config (an env-profile conflict)
        raise NotReady(str(exc)) from None
    return config


def main(argv: Sequence[str] | None = None, recipe=None) -> int:
    """``verl-ascend cluster [--config-name NAME] [--timeout S] [--json] [overrides...]``."""
    from verl_ascend.cli import parser as cli_parser
    from verl_ascend.cluster.job import from_config
    from verl_ascend.launch.recipe import registered_recipe
    from verl_ascend.run.cluster import cluster_address

    recipe = recipe or registered_recipe()
    parser = cli_parser("cluster", "Check every node of the running Ray cluster for the job of this config: stack, "
                        "devices, environment, files, checkpoint folder, links, a collective. Run it on the head node.",
                        EXAMPLES)
    parser.add_argument("--config-name", default=recipe.default_config, help=f"recipe config (default {recipe.default_config})")
    parser.add_argument("--config-dir", default=None, help="folder holding the config (default: the recipe's config/)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds each round (and the collective's join) may take per node (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--collective-mib", type=float, default=COLLECTIVE_BYTES / 2**20,
                        help="MiB all-reduced to measure the bandwidth (default 16)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("overrides", nargs="*", help="upstream-style Hydra overrides, e.g. trainer.nnodes=16")
    args = parser.parse_intermixed_args(argv)  # options may follow overrides (scripts append theirs)
    if args.timeout <= 0 or args.collective_mib <= 0:
        parser.error("--timeout and --collective-mib must be positive")
    args.config_dir = args.config_dir or recipe.config_dir
    try:
        config = _config(args)
        job = from_config(config, os.environ)
        from omegaconf import OmegaConf

        address = cluster_address(config) or "auto"
        node_ip = OmegaConf.select(config, "ray_kwargs.ray_init._node_ip_address", default=None)
        report = run_check(job, address, node_ip, args.timeout, int(args.collective_mib * 2**20))
    except NotReady as exc:
        print(f"verl-ascend cluster: not ready: {exc}", file=sys.stderr)
        return REFUSED
    except Exception as exc:  # noqa: BLE001 - the check itself broke: say so with exit 1, never "not ready"
        import traceback

        traceback.print_exc()
        print(f"verl-ascend cluster: the check itself failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return FAILED
    print(to_json(report) if args.json else text(report), flush=True)
    return OK if report.ready else REFUSED
