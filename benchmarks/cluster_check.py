"""``verl-ascend cluster`` on the two-node loopback cluster: its wall time, what detecting each fault costs, and
the arithmetic for 16 nodes.

Starts ``scripts/two_node_cluster.sh``'s cluster (its own ``CLUSTER_DIR``), then runs the check for the tiny
job (``dapo_tiny_cpu``, ``trainer.nnodes=2``) ``--repeats`` times on the healthy cluster and once per injected
fault (the worker restarted with a shadowing ``PYTHONPATH``, without a variable, with a missing interface, with
a private empty mount over the model folder or the checkpoint folder; a listener in the HCCL port range; the
worker frozen). Per run: the command's wall time (Python start, compose, connect, the four rounds, print), the
check's own time (``wall_s`` of the report), each round's time, the collective's bandwidth, the nodes and
checks that FAILed. Detection is counted when exactly the worker is named with the fault's check.

Per-node cost: the rounds run on every node at once, so a node adds the driver's share only -- receiving its
record and comparing it -- which is measured here by comparing N copies of this machine's real facts. The
16-node estimate is: the slowest node's observe round (as measured) + 16 x the driver's per-node cost + the
collective (its bus bandwidth as measured, the ring's 2(n-1)/n factor for 16 ranks).

    python benchmarks/cluster_check.py [--repeats 3] [--timeout 30] [--out benchmarks/results/cluster_check]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "two_node_cluster.sh"
BASE_ENV = "GLOO_SOCKET_IFNAME=lo HCCL_CONNECT_TIMEOUT=600"
WORKER = "127.0.0.3"


class Bench:
    def __init__(self, root: Path, timeout_s: float):
        self.root, self.timeout_s = root, timeout_s
        self.dir = Path(f"/tmp/vacl-bench-{os.getpid()}")
        self.tiny = root / "tiny"
        self.models, self.ckpt, self.shadow = root / "models", root / "ckpt", root / "shadow"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.base_port = s.getsockname()[1]

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VERL_USE_EXTERNAL_MODULES")}
        env.update(CLUSTER_DIR=str(self.dir), NODE_CPUS="1", NODE_GPUS="1", START_WAIT_S="400", PYTHON=sys.executable,
                   VERL_ASCEND_TINY_DIR=str(self.tiny), HEAD_ENV=BASE_ENV, WORKER_ENV=BASE_ENV, RAY_ADDRESS="",
                   GLOO_SOCKET_IFNAME="lo", HCCL_CONNECT_TIMEOUT="600")
        env.update(extra)
        return env

    def script(self, *args: str, **extra) -> None:
        done = subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=self.env(**extra), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"two_node_cluster.sh {' '.join(args)} failed: {done.stderr[-2000:]}")

    def prepare(self) -> None:
        subprocess.run([sys.executable, "-m", "verl_ascend", "assets", "--root", str(self.tiny)], check=True,
                       capture_output=True)
        shutil.copytree(self.tiny / "model", self.models / "tiny")
        dist = self.shadow / "transformers-4.99.0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.99.0\n")
        self.script("start")

    def check(self, timeout_s: float | None = None) -> dict:
        args = ["check", "--json", "--timeout", str(timeout_s or self.timeout_s),
                f"actor_rollout_ref.model.path={self.models / 'tiny'}", f"trainer.default_local_dir={self.ckpt}/run",
                f"+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_IF_BASE_PORT={self.base_port}"]
        begin = time.monotonic()
        done = subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=self.env(), capture_output=True, text=True)
        wall = time.monotonic() - begin
        if not done.stdout.strip().startswith("{"):
            raise SystemExit(f"the check printed no report (exit {done.returncode}): {done.stderr[-2000:]}")
        report = json.loads(done.stdout)
        failed = sorted({(c["node"], c["check"]) for c in report["findings"] if c["status"] == "FAIL"})
        return {"exit": done.returncode, "command_s": round(wall, 2), "check_s": round(report.get("wall_s", 0.0), 2),
                "failed": failed, "findings": len(report["findings"]), "rounds": rounds(report["notes"]),
                "bus_gbps": bandwidth(report)}


def rounds(notes: list[str]) -> dict[str, float]:
    out = {}
    for note in notes:
        if note.startswith("round "):
            name, _, seconds = note[len("round "):].rpartition(": ")
            out[name.split(" (")[0]] = float(seconds.rstrip(" s"))
    return out


def bandwidth(report: dict) -> float | None:
    values = [c["data"]["bus_bytes_per_s"] for c in report.get("cells", []) if c["check"] == "collective" and c["data"]]
    return round(min(values) / 1e9, 3) if values else None


FAULTS = (  # name, worker env, worker private folders, the check that must name the worker
    ("package version", "shadow", "", "stack"),
    ("model folder missing", BASE_ENV, "models", "files"),
    ("variable missing", "-u HCCL_CONNECT_TIMEOUT GLOO_SOCKET_IFNAME=lo", "", "env"),
    ("interface missing", "GLOO_SOCKET_IFNAME=ens9 HCCL_CONNECT_TIMEOUT=600", "", "socket"),
    ("node-local checkpoint", BASE_ENV, "ckpt", "checkpoint"),
    ("port in use", BASE_ENV, "", "ports"),
    ("node cannot join", BASE_ENV, "", "node"),
)


def run_fault(bench: Bench, name: str, env: str, private: str, check: str) -> dict:
    if env == "shadow":
        env = f"{BASE_ENV} PYTHONPATH={bench.shadow}:{REPO / 'scripts'}"
    bench.script("restart-worker", WORKER_ENV=env, WORKER_PRIVATE=str(getattr(bench, private)) if private else "")
    if name == "port in use":
        with socket.socket() as holder:
            holder.bind((WORKER, bench.base_port + 3))
            holder.listen()
            result = bench.check()
    elif name == "node cannot join":
        bench.script("freeze")
        try:
            result = bench.check()
        finally:
            bench.script("thaw")
    else:
        result = bench.check()
    nodes = {node for node, _ in result["failed"]}
    result.update(fault=name, detected=result["exit"] == 2 and nodes == {WORKER} and (WORKER, check) in result["failed"])
    return result


def driver_cost_per_node(copies: int = 64) -> float:
    """Seconds the driver spends comparing one node's record: N copies of this machine's real facts compared."""
    from verl_ascend.cluster import compare, probe
    from verl_ascend.cluster.job import Job

    job = Job("cpu", copies, 1, {"env_vars": {}}, {}, (), (), tempfile.gettempdir(), None, None)
    facts = probe.facts(job)
    begin = time.perf_counter()
    for _ in range(copies):
        compare.stack_cell(facts["stack"], dict(facts["stack"]))
        compare.env_cell(job, dict(facts["env"]), {}, "head")
        compare.files_cell(facts["files"], dict(facts["files"]))
    return (time.perf_counter() - begin) / copies


def estimate(healthy: list[dict], per_node_s: float, nodes: int = 16, nbytes: int = 16 << 20) -> dict:
    """The 16-node arithmetic from the measured parts."""
    observe = max(r["rounds"].get("observe", 0.0) for r in healthy)
    bus = min(r["bus_gbps"] for r in healthy if r["bus_gbps"]) * 1e9
    allreduce = nbytes * 2 * (nodes - 1) / nodes / bus
    fixed = min(r["command_s"] - r["check_s"] for r in healthy)  # Python start, compose, connect: per run
    return {"nodes": nodes, "observe_s": observe, "driver_per_node_s": per_node_s, "allreduce_s": allreduce,
            "command_fixed_s": fixed, "total_s": fixed + observe + nodes * per_node_s + allreduce}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [("healthy", r) for r in results["healthy"]] + [(r["fault"], r) for r in results["faults"]]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{n}: {'ready, 0 findings' if n == 'healthy' else 'detected' if r['detected'] else 'MISSED'}"
              for n, r in runs]
    ax.bar(range(len(runs)), [r["command_s"] for _, r in runs], color="#9ecae1", label="command (Python start, compose, print)")
    ax.bar(range(len(runs)), [r["check_s"] for _, r in runs], color="#3182bd", label="check (four rounds)")
    ax.axhline(60, color="red", linestyle="--", linewidth=1, label="60 s budget per fault")
    ax.set_xticks(range(len(runs)), labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("seconds")
    ax.set_title("verl-ascend cluster on the two-node loopback cluster (2 shared cores)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="healthy runs (default 3)")
    parser.add_argument("--timeout", type=float, default=30.0, help="the check's --timeout (default 30, its own default)")
    parser.add_argument("--only", default="", help="comma-separated fault names: run those and merge them into "
                        "an earlier results.json (the rest kept)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "cluster_check"))
    parser.add_argument("--plot", default=str(REPO / "docs" / "ascend_tutorial" / "images" / "cluster_check.png"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vacl-bench-") as tmp:
        bench = Bench(Path(tmp), args.timeout)
        try:
            bench.prepare()
            healthy = [bench.check() for _ in range(args.repeats)]
            only = [n.strip() for n in args.only.split(",") if n.strip()]
            faults = [run_fault(bench, *fault) for fault in FAULTS if not only or fault[0] in only]
        finally:
            bench.script("thaw") if (bench.dir / "worker.pid").exists() else None
            bench.script("stop") if bench.dir.exists() else None
            shutil.rmtree(bench.dir, ignore_errors=True)
    if only:  # merged into the earlier full run: these faults rerun, the healthy runs added
        earlier = json.loads((out / "results.json").read_text())
        rerun = {r["fault"] for r in faults}
        faults = [r if r["fault"] not in rerun else next(f for f in faults if f["fault"] == r["fault"])
                  for r in earlier["faults"]]
        healthy = earlier["healthy"] + healthy
    results = {"healthy": healthy, "faults": faults, "cores": os.cpu_count(), "load": os.getloadavg(),
               "false_alarms": sum(r["findings"] for r in healthy),
               "detected": f"{sum(r['detected'] for r in faults)} of {len(faults)}"}
    results["estimate_16"] = estimate(healthy, driver_cost_per_node())
    (out / "results.json").write_text(json.dumps(results, indent=2))
    plot(results, Path(args.plot))
    for r in healthy:
        print(f"healthy: exit {r['exit']}, {r['findings']} findings, command {r['command_s']} s, check {r['check_s']} s, "
              f"rounds {r['rounds']}, bus {r['bus_gbps']} GB/s")
    for r in faults:
        print(f"{r['fault']:<22} {'detected' if r['detected'] else 'MISSED'}: exit {r['exit']}, failed {r['failed']}, "
              f"command {r['command_s']} s, check {r['check_s']} s")
    est = results["estimate_16"]
    print(f"detected {results['detected']}; false alarms on the healthy cluster: {results['false_alarms']}")
    print(f"16 nodes: {est['command_fixed_s']:.1f} s fixed + {est['observe_s']:.1f} s observe (slowest node) + 16 x "
          f"{est['driver_per_node_s'] * 1e3:.2f} ms driver per node + {est['allreduce_s'] * 1e3:.0f} ms all-reduce = "
          f"{est['total_s']:.1f} s")
    print(f"results: {out / 'results.json'}, plot: {args.plot}")
    return 0 if results["detected"].startswith(str(len(FAULTS))) and not results["false_alarms"] else 1


if __name__ == "__main__":
    sys.exit(main())
