"""``verl-ascend cluster`` on the two-node loopback cluster (``scripts/two_node_cluster.sh``): a healthy cluster
gives 0 findings, then one injected fault at a time is detected and named on the right node (the worker,
127.0.0.3), the head (127.0.0.2) staying clean.

The faults are real: the worker node restarted with its own environment (a ``PYTHONPATH`` holding a
``transformers`` dist-info of another version, a variable the head has left out, a socket interface that
does not exist), or in its own mount namespace with an empty tmpfs over a folder (the model folder missing,
the checkpoint folder node-local), a listener in the job's HCCL port range on the worker's address, the
worker's processes stopped (a hung node). One cluster for the module; every process it started is stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch import require_e2e
from tests.recipe.helpers import REPO

pytestmark = pytest.mark.e2e  # starts a Ray cluster (tests/launch.py)

SCRIPT = REPO / "scripts" / "two_node_cluster.sh"
HEAD, WORKER = "127.0.0.2 (head)", "127.0.0.3"
BASE_ENV = "GLOO_SOCKET_IFNAME=lo HCCL_CONNECT_TIMEOUT=600"  # both nodes' and the driver's shell
TIMEOUT_S = 60  # per round: generous, the machine is shared (the benchmark measures the default)


class Cluster:
    def __init__(self, root: Path, tiny_dir: Path):
        self.dir = Path(f"/tmp/vacl-{os.getpid()}")  # short: Ray's unix sockets live under it
        self.root = root
        self.models = root / "models"
        self.model = self.models / "tiny"
        shutil.copytree(tiny_dir / "model", self.model)
        self.ckpt = root / "ckpt"
        self.shadow = root / "shadow"
        dist = self.shadow / "transformers-4.99.0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.99.0\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.base_port = s.getsockname()[1]
        self.tiny_dir = tiny_dir
        self.worker = (BASE_ENV, "")

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VERL_USE_EXTERNAL_MODULES")}
        env.update(CLUSTER_DIR=str(self.dir), NODE_CPUS="1", START_WAIT_S="400", NODE_GPUS="1", PYTHON=sys.executable,
                   VERL_ASCEND_TINY_DIR=str(self.tiny_dir), HEAD_ENV=BASE_ENV, WORKER_ENV=BASE_ENV,
                   RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.dir / "auth_token"))
        env.update(GLOO_SOCKET_IFNAME="lo", HCCL_CONNECT_TIMEOUT="600")  # the driver's shell: as the nodes'
        env.update(extra)
        return env

    def script(self, *args: str, **extra) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=self.env(**extra), capture_output=True,
                              text=True, timeout=900)

    def worker_as(self, env: str = BASE_ENV, private: str = "") -> None:
        """The worker node restarted with this environment and these private folders, unless it already is."""
        if self.worker == (env, private):
            return
        done = self.script("restart-worker", WORKER_ENV=env, WORKER_PRIVATE=private)
        assert done.returncode == 0, done.stderr[-2000:]
        self.worker = (env, private)

    def check(self, *args: str, timeout_s: int = TIMEOUT_S) -> tuple[int, dict, str]:
        """``verl-ascend cluster --json`` for the tiny job on both nodes: (exit status, report, stderr)."""
        address = (self.dir / "address").read_text().strip()
        command = [sys.executable, "-m", "verl_ascend", "cluster", "--config-name", "dapo_tiny_cpu", "--json",
                   "--timeout", str(timeout_s), "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
                   f"actor_rollout_ref.model.path={self.model}", f"trainer.default_local_dir={self.ckpt}/run",
                   f"+ray_kwargs.ray_init.address={address}", "+ray_kwargs.ray_init._node_ip_address=127.0.0.2",
                   f"+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_IF_BASE_PORT={self.base_port}", *args]
        done = subprocess.run(command, cwd=REPO, env=self.env(RAY_ADDRESS=""), capture_output=True, text=True, timeout=300)
        report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
        return done.returncode, report, done.stderr


@pytest.fixture(scope="module")
def cluster(tiny_dir, tmp_path_factory):
    require_e2e("scripts/two_node_cluster.sh")
    made = Cluster(tmp_path_factory.mktemp("cluster"), tiny_dir)
    try:
        started = made.script("start")
        assert started.returncode == 0, started.stderr[-3000:]
        yield made
    finally:
        made.script("thaw")  # a frozen worker must not outlive the test
        made.script("stop")
        pids = [p for p in (made.dir / "head.pid", made.dir / "worker.pid") if p.exists()]
        for log in made.dir.glob("*.log"):  # kept with the test's files for a failure's diagnosis
            shutil.copy(log, made.root / log.name)
        shutil.rmtree(made.dir, ignore_errors=True)
        assert not pids, f"the script left pid files: {pids}"


def failures(report: dict) -> dict[str, set[str]]:
    """node -> the checks that FAILed there."""
    out: dict[str, set[str]] = {}
    for cell in report["findings"]:
        if cell["status"] == "FAIL":
            out.setdefault(cell["node"], set()).add(cell["check"])
    return out


def the_finding(report: dict, check: str) -> dict:
    [cell] = [c for c in report["findings"] if c["check"] == check and c["status"] == "FAIL"]
    assert cell["expected"] and cell["fix"], cell
    return cell


def test_a_healthy_cluster_has_no_finding(cluster):
    code, report, err = cluster.check()
    assert code == 0, err[-3000:]
    assert report["ready"] and report["findings"] == [], report["findings"]
    assert report["nodes"] == [HEAD, WORKER]
    for node in (HEAD, WORKER):
        row = report["table"][node]
        assert {c: row[c] for c in ("stack", "env", "socket", "ports", "files", "checkpoint", "collective")} == dict.fromkeys(
            ("stack", "env", "socket", "ports", "files", "checkpoint", "collective"), "ok")
        assert row["links"] == "skip"  # the NPU-only probe says what it would check
    [bandwidth] = [n for n in report["notes"] if n.startswith("collective:")]
    assert "GB/s" in bandwidth
    assert not any((cluster.ckpt / "run").glob(".verl-ascend-cluster-*"))  # the tokens are cleaned up


def test_a_port_in_the_range_in_use_on_the_worker(cluster):
    cluster.worker_as()
    with socket.socket() as holder:
        holder.bind(("127.0.0.3", cluster.base_port + 3))
        holder.listen()
        code, report, err = cluster.check()
    assert code == 2, err[-2000:]
    assert failures(report) == {WORKER: {"ports"}}
    assert f"in use {cluster.base_port + 3}" in the_finding(report, "ports")["detail"]


def test_a_package_of_another_version_on_the_worker(cluster):
    cluster.worker_as(f"{BASE_ENV} PYTHONPATH={cluster.shadow}:{REPO / 'scripts'}")
    code, report, err = cluster.check()
    assert code == 2, err[-2000:]
    assert failures(report) == {WORKER: {"stack"}}
    cell = the_finding(report, "stack")
    assert cell["detail"].startswith(f"transformers 4.99.0 ({cluster.shadow}")
    assert "pip install transformers==" in cell["fix"]


def test_the_model_folder_missing_on_the_worker(cluster):
    cluster.worker_as(private=str(cluster.models))
    code, report, err = cluster.check()
    assert code == 2, err[-2000:]
    assert failures(report) == {WORKER: {"files"}}
    assert the_finding(report, "files")["detail"] == f"model {cluster.model} missing"


def test_a_variable_missing_from_the_worker(cluster):
    cluster.worker_as("-u HCCL_CONNECT_TIMEOUT GLOO_SOCKET_IFNAME=lo")  # the driver's shell has it: not passed on
    code, report, err = cluster.check()
    assert code == 2, err[-2000:]
    assert failures(report) == {WORKER: {"env"}}
    cell = the_finding(report, "env")
    assert cell["detail"] == "HCCL_CONNECT_TIMEOUT=<unset>" and "HCCL_CONNECT_TIMEOUT=600" in cell["expected"]


def test_a_socket_interface_that_does_not_exist_on_the_worker(cluster):
    cluster.worker_as("GLOO_SOCKET_IFNAME=ens9 HCCL_CONNECT_TIMEOUT=600")
    code, report, err = cluster.check()
    assert code == 2, err[-2000:]
    # the interface is missing, the driver's value differs, and gloo cannot form the group on that node
    assert failures(report) == {WORKER: {"socket", "env", "collective"}}
    assert "no interface ens9" in the_finding(report, "socket")["detail"]


def test_a_node_local_checkpoint_folder_on_the_worker(cluster):
    cluster.worker_as(private=str(cluster.ckpt))
    code, report, err = cluster.check()
    assert code == 2, err[-2000:]
    assert failures(report) == {WORKER: {"checkpoint"}}
    cell = the_finding(report, "checkpoint")
    assert "node-local" in cell["detail"] and "resume" in cell["detail"]


EXAMPLE = REPO / "examples" / "dapo_qwen25_32b_npu.sh"


def example(cluster, tmp_path, *args, **env):
    base = dict(RAY_ADDRESS="", NNODES="2", NPUS_PER_NODE="1", PYTHON=sys.executable, HOME=str(tmp_path),
                MODEL_PATH=str(cluster.model), OUTPUT_DIR=str(tmp_path / "runs"),
                VERL_ASCEND_MEMORY_CACHE=os.environ.get("VERL_ASCEND_MEMORY_CACHE",
                                                        os.path.expanduser("~/.cache/verl-ascend/memory")))
    environ = cluster.env(**{**base, **env})
    address = (cluster.dir / "address").read_text().strip()
    return subprocess.run(["bash", str(EXAMPLE), f"+ray_kwargs.ray_init.address={address}",
                           "+ray_kwargs.ray_init._node_ip_address=127.0.0.2", *args],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=600)


def test_the_npu_example_says_the_check_will_run(cluster, tmp_path):
    sizes = dict(NPUS_PER_NODE="8", MODEL_PATH="/models/q32")  # the shipped layout: the dry run's doctor accepts it
    run = example(cluster, tmp_path, DRY_RUN="1", **sizes)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "# cluster check: NNODES=2 > 1, so a real run first runs `verl-ascend cluster`" in run.stderr
    assert "CLUSTER_CHECK=0 skips it" in run.stderr
    skipped = example(cluster, tmp_path, DRY_RUN="1", CLUSTER_CHECK="0", **sizes)
    assert skipped.returncode == 0 and "# cluster check" not in skipped.stderr


def test_the_npu_example_stops_on_a_finding_before_anything_loads(cluster, tmp_path):
    """On these CPU nodes the NPU job's check finds no NPU slots (and no NPU stack): exit 2 before `train`."""
    cluster.worker_as()
    run = example(cluster, tmp_path)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "the cluster is not ready for the job (verl-ascend cluster exit 2): nothing was loaded" in run.stderr
    assert "NOT READY" in run.stdout and "Ray NPU slots 0" in run.stdout
    assert not (tmp_path / "runs").exists()  # train never started: no Hydra folder, no checkpoint folder


def test_a_node_that_cannot_join_is_named_within_the_timeout(cluster):
    cluster.worker_as()
    frozen = cluster.script("freeze")
    assert frozen.returncode == 0, frozen.stderr
    try:
        code, report, err = cluster.check(timeout_s=30)
    finally:
        cluster.script("thaw")
    assert code == 2, err[-2000:]
    assert failures(report) == {WORKER: {"node"}}
    assert "no answer within 30 s" in the_finding(report, "node")["detail"]
    assert report["table"][HEAD]["collective"] == "skip"  # nobody left to join
