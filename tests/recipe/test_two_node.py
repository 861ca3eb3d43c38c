"""Two Ray nodes on one machine (``scripts/two_node_cluster.sh``): the tiny DAPO recipe trains
with ``trainer.nnodes=2``, one training rank and one rollout server on each node, and every
node's processes load this distribution's plugins and see the driver's exported environment.

Evidence comes from Ray's own actor table (class, node, pid of every actor the run created)
joined with ``scripts/node_report.py``'s per-process records (plugins, platform, env).
The cluster is started and stopped by the script (its own process trees, by pid).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.launch import require_e2e
from tests.recipe.fault_helpers import read_jsonl
from tests.recipe.helpers import REPO

pytestmark = pytest.mark.e2e  # launches the recipe or a Ray cluster (tests/launch.py)

SCRIPT = REPO / "scripts" / "two_node_cluster.sh"

ACTORS = r"""
import json, sys
import ray
from ray._private import state

ray.init(address=sys.argv[1], _node_ip_address=sys.argv[1].split(":")[0], logging_level="ERROR", log_to_driver=False)
nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
actors = [
    {"cls": a["ActorClassName"].rsplit(".", 1)[-1], "node": a["Address"]["NodeID"], "pid": a["Pid"], "state": a["State"]}
    for a in state.actors().values()
]
print(json.dumps({"nodes": nodes, "actors": actors}))
"""


def _script_env(cluster_dir: Path, tiny_dir: Path, out_dir: Path) -> dict:
    env = {
        **os.environ,
        "CLUSTER_DIR": str(cluster_dir),
        "NODE_CPUS": "8",
        "NODE_GPUS": "1",
        "PYTHON": sys.executable,
        "VERL_ASCEND_TINY_DIR": str(tiny_dir),
        "VERL_ASCEND_OUTPUT_DIR": str(out_dir),
    }
    for key in ("VERL_FILE_LOGGER_PATH", "RAY_ADDRESS", "VERL_USE_EXTERNAL_MODULES"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def two_node_run(tiny_dir, tmp_path_factory):
    # A short path: Ray puts unix sockets under the cluster's temp dir.
    require_e2e("scripts/two_node_cluster.sh")
    cluster_dir = Path(f"/tmp/va2n-{os.getpid()}")
    out = tmp_path_factory.mktemp("two_node")
    env = _script_env(cluster_dir, tiny_dir, out)
    try:
        run = subprocess.run(
            ["bash", str(SCRIPT), "run", "trainer.total_training_steps=1"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
        )
        address = (cluster_dir / "address").read_text().strip()
        env_py = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(cluster_dir / "auth_token")}
        query = subprocess.run(
            [sys.executable, "-c", ACTORS, address], cwd=REPO, env=env_py, capture_output=True, text=True, timeout=300
        )
        table = json.loads(query.stdout.strip().splitlines()[-1]) if query.returncode == 0 else None
        reports = [json.loads(p.read_text()) for p in (cluster_dir / "nodes").glob("*.json")]
        yield {"run": run, "table": table, "query": query, "reports": reports, "out": out, "address": address}
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], cwd=REPO, env=env, capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(cluster_dir)], check=False)


def test_recipe_trained_on_the_two_node_cluster(two_node_run):
    run = two_node_run["run"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "connecting to the existing cluster at 127.0.0.2:" in run.stdout
    metrics = read_jsonl(two_node_run["out"] / "dapo_tiny_cpu" / "metrics.jsonl")
    assert [m["step"] for m in metrics if "critic/score/mean" in m["data"]] == [1]
    actor = two_node_run["out"] / "checkpoints" / "dapo_tiny_cpu" / "global_step_1" / "actor"
    assert {p.name for p in actor.glob("model_world_size_*")} == {"model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"}


def test_workers_ran_on_both_nodes(two_node_run):
    table = two_node_run["table"]
    assert table is not None, two_node_run["query"].stderr[-3000:]
    assert sorted(table["nodes"].values()) == ["127.0.0.2", "127.0.0.3"]  # loopback addresses only
    by_class = defaultdict(set)
    for actor in table["actors"]:
        by_class[actor["cls"]].add(actor["node"])
    both = set(table["nodes"])
    assert by_class["WorkerDict"] == both  # one training rank per node
    assert by_class["HFRolloutServer"] == both  # one rollout replica per node


def test_plugin_and_env_reached_both_nodes(two_node_run):
    table, reports = two_node_run["table"], two_node_run["reports"]
    assert table is not None
    run_dir = str(two_node_run["out"] / "dapo_tiny_cpu")
    worker_pids = {(a["node"], a["pid"]) for a in table["actors"] if a["cls"] in ("WorkerDict", "HFRolloutServer")}
    seen = defaultdict(list)
    for report in reports:
        if (report.get("node_id"), report["pid"]) in worker_pids:
            seen[report["node_id"]].append(report)
    assert set(seen) == set(table["nodes"]), [(r.get("node_ip"), r["cmdline"]) for r in reports]
    for node, records in seen.items():
        assert len(records) >= 2  # the training rank and the rollout server of that node
        for record in records:
            assert "verl.cpu.plugin" in record["plugins"] and record["platform"] == "PlatformCPU", record
            env = record["env"]
            assert env["VERL_ASCEND_RUN_DIR"] == run_dir
            assert env["VERL_FILE_LOGGER_PATH"] == os.path.join(run_dir, "metrics.jsonl")
            assert env["OMP_NUM_THREADS"] == "1"
            assert "recipe.dapo_ascend.register" in env["VERL_USE_EXTERNAL_MODULES"].split(",")


def test_cluster_is_private_to_the_script(two_node_run):
    """The cluster never became this machine's default: a plain ray.init() elsewhere starts its own."""
    current = Path("/tmp/ray/ray_current_cluster")
    assert not current.exists() or current.read_text().strip() != two_node_run["address"]
