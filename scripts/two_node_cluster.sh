#!/usr/bin/env bash
# A two-node Ray cluster on this one machine, and the tiny DAPO recipe trained across it.
#
#   scripts/two_node_cluster.sh start            start a head node and a worker node (loopback only)
#   scripts/two_node_cluster.sh status           the nodes Ray sees and their resources
#   scripts/two_node_cluster.sh run [overrides]  train dapo_tiny_cpu with trainer.nnodes=2 on them
#                                                (starts the cluster first if needed)
#   scripts/two_node_cluster.sh stop             stop both nodes (only the processes this script started)
#   scripts/two_node_cluster.sh demo [overrides] start, run, stop
#   scripts/two_node_cluster.sh check [args]     `verl-ascend cluster` for dapo_tiny_cpu on the two nodes
#                                                (args: its options and Hydra overrides; starts the cluster first)
#   scripts/two_node_cluster.sh restart-worker   stop the worker node and start it again (with WORKER_ENV, WORKER_PRIVATE)
#   scripts/two_node_cluster.sh freeze|thaw      SIGSTOP / SIGCONT the worker node's processes: a hung node
#
# Each node is its own `ray start --block` process tree with its own resources: NODE_CPUS logical
# CPUs, NODE_GPUS logical GPU slots (the cpu platform's training-rank tokens, see
# verl/cpu/platform.py) and a custom resource `verl_ascend_head` / `verl_ascend_worker`.
# Loopback only: the head's address is 127.0.0.2 and the worker's 127.0.0.3 (Ray rewrites
# 127.0.0.1/localhost to the machine's routable IP; the rest of 127.0.0.0/8 is loopback too and
# is kept as given), on ports picked free at start. Ray's token authentication is on, with a
# token private to this cluster ($CLUSTER_DIR/auth_token). The cluster keeps its state (pids,
# address, token, Ray temp dir) in $CLUSTER_DIR, so it never becomes the "current" Ray cluster of
# this machine: other ray.init() calls here keep starting their own local clusters.
#
# Nodes started with `ray start` do not inherit the driver's environment: what workers need goes
# through `ray_kwargs.ray_init.runtime_env.env_vars` (the recipe's entry point exports its own
# variables there). `run` also switches on scripts/node_report.py, which writes one
# record per process (node id, plugins loaded, platform, env) to $CLUSTER_DIR/nodes/, and prints
# a per-node summary at the end.
#
# Environment:
#   CLUSTER_DIR   state directory           (default /tmp/verl-ascend-2node-$(id -u))
#   NODE_CPUS     logical CPUs per node     (default 8)
#   NODE_GPUS     logical GPU slots per node (default 1; trainer.n_gpus_per_node follows it)
#   START_WAIT_S  seconds to wait for a node to join (default 180)
#   VERL_ASCEND_TINY_DIR, VERL_ASCEND_OUTPUT_DIR   as for examples/dapo_tiny_cpu.sh
#   HEAD_ENV, WORKER_ENV  arguments of env(1) for that node's `ray start` (default none): NAME=VALUE sets a
#                 variable on that node only, -u NAME removes it (e.g. WORKER_ENV="PYTHONPATH=/tmp/shadow")
#   WORKER_PRIVATE  folders (space-separated) the worker node sees as its own empty disk: it runs in a private
#                 mount namespace (unshare -rm) with a tmpfs over each, so they are node-local like a local
#                 disk of another host (default none)
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER_DIR="${CLUSTER_DIR:-/tmp/verl-ascend-2node-$(id -u)}"
NODE_CPUS="${NODE_CPUS:-8}"
NODE_GPUS="${NODE_GPUS:-1}"
START_WAIT_S="${START_WAIT_S:-180}"
PY="${PYTHON:-python}"
# scripts/ on the path of the nodes (started from here) and the driver: node_report is imported by name
export PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
# Ray's CLI run by $PY itself, so every node (and each worker it starts) runs the interpreter named here,
# whatever the shebang of a `ray` script on PATH says (a copied virtual environment keeps the old one).
RAY_CLI=("$PY" -m ray.scripts.scripts)

HEAD_IP=127.0.0.2
WORKER_IP=127.0.0.3

log() { echo "[two-node] $*" >&2; }

# Every Ray process of this cluster (nodes, their workers, drivers) authenticates with the
# cluster's own token.
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="$CLUSTER_DIR/auth_token"

free_ports() {  # N free TCP ports on 127.0.0.1
  "$PY" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

descendants() {  # pid and all its descendants, children first
  local pid=$1 child
  for child in $(pgrep -P "$pid" 2>/dev/null || true); do descendants "$child"; done
  echo "$pid"
}

node_up() { [ -f "$CLUSTER_DIR/$1.pid" ] && kill -0 "$(cat "$CLUSTER_DIR/$1.pid")" 2>/dev/null; }

alive_nodes() {
  "$PY" - "$(cat "$CLUSTER_DIR/address")" <<'EOF' 2>/dev/null || echo 0
import sys, ray
ray.init(address=sys.argv[1], _node_ip_address=sys.argv[1].split(":")[0], logging_level="ERROR", log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
EOF
}

start_node() {  # name, ip, extra args...
  local name=$1 ip=$2; shift 2
  local ports; ports=($(free_ports 6))
  local node_env=() wrap=()
  if [ "$name" = head ]; then read -r -a node_env <<<"${HEAD_ENV:-}"; else read -r -a node_env <<<"${WORKER_ENV:-}"; fi
  if [ "$name" = worker ] && [ -n "${WORKER_PRIVATE:-}" ]; then
    # a private mount namespace: a tmpfs over each folder, seen by this node's processes only
    # shellcheck disable=SC2016
    wrap=(unshare -rm sh -c 'for d in $0; do mkdir -p "$d" && mount -t tmpfs tmpfs "$d" || exit 1; done; exec "$@"' "$WORKER_PRIVATE")
  fi
  # --block keeps `ray start` in the foreground as the parent of its node's processes, so the
  # node is one process tree that `stop` can end by pid.
  setsid ${wrap[@]+"${wrap[@]}"} env ${node_env[@]+"${node_env[@]}"} "${RAY_CLI[@]}" start --block --node-ip-address="$ip" \
    --num-cpus="$NODE_CPUS" --num-gpus="$NODE_GPUS" \
    --node-manager-port="${ports[0]}" --object-manager-port="${ports[1]}" \
    --runtime-env-agent-port="${ports[2]}" --dashboard-agent-grpc-port="${ports[3]}" \
    --dashboard-agent-listen-port="${ports[4]}" --metrics-export-port="${ports[5]}" \
    --disable-usage-stats "$@" >"$CLUSTER_DIR/$name.log" 2>&1 &
  echo $! >"$CLUSTER_DIR/$name.pid"
}

wait_nodes() {  # count, timeout_s
  local want=$1 deadline=$((SECONDS + $2)) have=0
  while [ $SECONDS -lt $deadline ]; do
    have=$(alive_nodes)
    [ "$have" -ge "$want" ] && return 0
    sleep 2
  done
  log "only $have of $want nodes came up; see $CLUSTER_DIR/*.log"
  return 1
}

cmd_start() {
  if node_up head && node_up worker; then log "already running at $(cat "$CLUSTER_DIR/address")"; return 0; fi
  cmd_stop >/dev/null 2>&1 || true
  mkdir -p "$CLUSTER_DIR"
  (umask 077 && "$PY" -c "import uuid; print(uuid.uuid4().hex + uuid.uuid4().hex, end='')" >"$RAY_AUTH_TOKEN_PATH")
  local gcs client; read -r gcs client <<<"$(free_ports 2)"
  echo "$HEAD_IP:$gcs" >"$CLUSTER_DIR/address"
  export RAY_ADDRESS=""  # never pick up another cluster from the environment
  start_node head "$HEAD_IP" --head --port="$gcs" --ray-client-server-port="$client" \
    --include-dashboard=false --temp-dir="$CLUSTER_DIR/ray" --resources='{"verl_ascend_head": 1}'
  wait_nodes 1 "$START_WAIT_S"
  start_node worker "$WORKER_IP" --address="$HEAD_IP:$gcs" --resources='{"verl_ascend_worker": 1}'
  wait_nodes 2 "$START_WAIT_S"
  log "cluster up at $(cat "$CLUSTER_DIR/address"): head pid $(cat "$CLUSTER_DIR/head.pid"), worker pid $(cat "$CLUSTER_DIR/worker.pid")"
}

cmd_restart_worker() {
  node_up head || { log "not started"; return 1; }
  stop_nodes worker
  export RAY_ADDRESS=""
  start_node worker "$WORKER_IP" --address="$(cat "$CLUSTER_DIR/address")" --resources='{"verl_ascend_worker": 1}'
  wait_worker "$START_WAIT_S"
  log "worker restarted: pid $(cat "$CLUSTER_DIR/worker.pid")"
}

wait_worker() {  # timeout_s: until a live node at the worker's address is in the cluster
  local deadline=$((SECONDS + $1))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(alive_at "$WORKER_IP")" -ge 1 ] && return 0
    sleep 2
  done
  log "the worker did not come back; see $CLUSTER_DIR/worker.log"
  return 1
}

alive_at() {  # live nodes at this address
  "$PY" - "$(cat "$CLUSTER_DIR/address")" "$1" <<'EOF' 2>/dev/null || echo 0
import sys, ray
ray.init(address=sys.argv[1], _node_ip_address=sys.argv[1].split(":")[0], logging_level="ERROR", log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == sys.argv[2]))
EOF
}

cmd_signal() {  # SIGSTOP / SIGCONT every process of the worker node
  node_up worker || { log "no worker running"; return 1; }
  # shellcheck disable=SC2046
  kill "-$1" $(descendants "$(cat "$CLUSTER_DIR/worker.pid")")
  log "worker: SIG$1 sent"
}

cmd_check() {
  cmd_start
  export VERL_ASCEND_TINY_DIR="${VERL_ASCEND_TINY_DIR:-$HOME/.cache/verl-ascend/tiny}"
  "$PY" -m verl_ascend assets --root "$VERL_ASCEND_TINY_DIR" >/dev/null
  RAY_ADDRESS="" "$PY" -m verl_ascend cluster --config-name dapo_tiny_cpu \
    trainer.nnodes=2 trainer.n_gpus_per_node="$NODE_GPUS" \
    +ray_kwargs.ray_init.address="$(cat "$CLUSTER_DIR/address")" +ray_kwargs.ray_init._node_ip_address="$HEAD_IP" \
    "$@"
}

cmd_stop() { stop_nodes worker head; }

stop_nodes() {
  local name pids
  for name in "$@"; do
    [ -f "$CLUSTER_DIR/$name.pid" ] || continue
    pids=$(descendants "$(cat "$CLUSTER_DIR/$name.pid")")
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    sleep 1
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    rm -f "$CLUSTER_DIR/$name.pid"
    log "stopped $name"
  done
}

cmd_status() {
  [ -f "$CLUSTER_DIR/address" ] || { log "not started"; return 1; }
  "$PY" - "$(cat "$CLUSTER_DIR/address")" <<'EOF'
import sys, ray
ray.init(address=sys.argv[1], _node_ip_address=sys.argv[1].split(":")[0], logging_level="ERROR", log_to_driver=False)
for n in ray.nodes():
    print(n["NodeID"][:12], "alive" if n["Alive"] else "dead", n["NodeManagerAddress"], {k: v for k, v in n["Resources"].items() if not k.startswith("node:")})
EOF
}

cmd_summary() {
  "$PY" - "$CLUSTER_DIR/nodes" <<'EOF'
import collections, glob, json, sys
by_node = collections.defaultdict(list)
for path in glob.glob(f"{sys.argv[1]}/*.json"):
    rec = json.load(open(path))
    by_node[rec.get("node_id", "?")].append(rec)
for node, recs in sorted(by_node.items()):
    kinds = collections.Counter(r["cmdline"].split()[0] if r["cmdline"] else "?" for r in recs)
    plugins = sorted({p for r in recs for p in r["plugins"]})
    platforms = sorted({r.get("platform", "?") for r in recs})
    print(f"node {node[:12]}: {len(recs)} processes, plugins {plugins}, platform {platforms}, {dict(kinds)}")
EOF
}

cmd_run() {
  cmd_start
  export VERL_ASCEND_TINY_DIR="${VERL_ASCEND_TINY_DIR:-$HOME/.cache/verl-ascend/tiny}"
  export PYTHONUNBUFFERED=1
  "$PY" -m verl_ascend assets --root "$VERL_ASCEND_TINY_DIR" >/dev/null
  rm -rf "$CLUSTER_DIR/nodes"
  local modules="${VERL_USE_EXTERNAL_MODULES:+$VERL_USE_EXTERNAL_MODULES,}node_report"
  local rc=0
  RAY_ADDRESS="" VERL_USE_EXTERNAL_MODULES="$modules" "$PY" -m verl_ascend train --config-name dapo_tiny_cpu \
    trainer.nnodes=2 trainer.n_gpus_per_node="$NODE_GPUS" \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
    +ray_kwargs.ray_init.address="$(cat "$CLUSTER_DIR/address")" +ray_kwargs.ray_init._node_ip_address="$HEAD_IP" \
    +ray_kwargs.ray_init.runtime_env.env_vars.VERL_ASCEND_NODE_REPORT_DIR="$CLUSTER_DIR/nodes" \
    "$@" || rc=$?
  cmd_summary || true
  return $rc
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  run) shift; cmd_run "$@" ;;
  demo) shift; trap cmd_stop EXIT; cmd_run "$@" ;;
  check) shift; cmd_check "$@" ;;
  restart-worker) cmd_restart_worker ;;
  freeze) cmd_signal STOP ;;
  thaw) cmd_signal CONT ;;
  *) sed -n '2,41p' "$0"; exit 2 ;;
esac
