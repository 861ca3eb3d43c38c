#!/usr/bin/env bash
# DAPO on Qwen2.5-32B with 128 Ascend A2 cards (16 nodes x 8): the seed article's job, one command.
#
#   DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh                 # print config + env + doctor verdict, start nothing
#   bash examples/dapo_qwen25_32b_npu.sh                           # train (on the Ray head node of a running cluster)
#   bash examples/dapo_qwen25_32b_npu.sh trainer.total_epochs=2 actor_rollout_ref.rollout.enforce_eager=False
#   DRY_RUN=1 bash examples/dapo_qwen25_32b_npu.sh trainer.v1.trainer_mode=separate_async   # upstream's async mode
#
# trainer.v1.trainer_mode=separate_async (upstream's key and value) adds the preset +pools=npu_separate_128
# (recipe/dapo_ascend/config/pools/npu_separate_128.yaml: parameter_sync_step, the HCCL weight-sync engine)
# and splits the NNODES nodes into a trainer pool of NNODES - ROLLOUT_NNODES nodes and a standalone
# rollout pool of ROLLOUT_NNODES nodes (why 4 + 12 of 16: docs/ascend_tutorial/async_training.md, "NPU").
#
# Every argument is passed through as an upstream-style Hydra override, applied after the ones
# below, so it wins. Defaults live in recipe/dapo_ascend/config/dapo_qwen25_32b_npu.yaml (NPU
# sizes and switches) on top of dapo_base.yaml (the DAPO algorithm); each value there says why.
#
# Environment variables (default in brackets):
#   MODEL_PATH      local Hugging Face checkpoint                [$HOME/models/Qwen2.5-32B]
#   DATA_DIR        folder of the prepared parquet files         [$HOME/data/dapo]
#   TRAIN_FILE      training set (DAPO-Math-17k)                 [$DATA_DIR/dapo-math-17k.parquet]
#   VAL_FILE        validation set (AIME 2024)                   [$DATA_DIR/aime-2024.parquet]
#   OUTPUT_DIR      run outputs: metrics, Hydra logs             [$HOME/verl-ascend-runs]
#   EXPERIMENT      experiment name (trainer.experiment_name)    [dapo_qwen25_32b_npu]
#   CKPT_DIR        checkpoints (trainer.default_local_dir)      [$OUTPUT_DIR/checkpoints/$EXPERIMENT]
#   NNODES          nodes in the Ray cluster                     [16]
#   NPUS_PER_NODE   Ascend cards per node                        [8]
#   ROLLOUT_NNODES  separate_async only: nodes of the rollout pool [12]; the trainer pool gets the rest
#   DRY_RUN         1 = compose, resolve the env profile, run the config doctor, print, exit [0]
#   CLUSTER_CHECK   with NNODES > 1: 1 = run `verl-ascend cluster` on the running Ray cluster first and
#                   stop (its exit status, 2 = a node not ready) before anything loads; 0 = skip it [1]
#                   (docs/ascend_tutorial/multi_node.md)
#   PYTHON          interpreter with verl-ascend installed       [python3]
# Prepare the data first (from files you downloaded; nothing is fetched):
#   verl-ascend data dapo-math -i dapo-math-17k.parquet -o "$DATA_DIR/dapo-math-17k.parquet"
#   verl-ascend data aime2024 -i aime_2024_problems.parquet -o "$DATA_DIR/aime-2024.parquet"
# Multi-node: start Ray on every node first (docs/ascend_tutorial/quick_start.md), then run this on the head.
# Note: the 4096-token overlong buffer must stay shorter than data.max_response_length; when you
# shorten responses, lower reward.reward_kwargs.overlong_buffer_cfg.len too (the doctor says so).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

MODEL_PATH="${MODEL_PATH:-$HOME/models/Qwen2.5-32B}"
DATA_DIR="${DATA_DIR:-$HOME/data/dapo}"
TRAIN_FILE="${TRAIN_FILE:-$DATA_DIR/dapo-math-17k.parquet}"
VAL_FILE="${VAL_FILE:-$DATA_DIR/aime-2024.parquet}"
OUTPUT_DIR="${OUTPUT_DIR:-$HOME/verl-ascend-runs}"
EXPERIMENT="${EXPERIMENT:-dapo_qwen25_32b_npu}"
CKPT_DIR="${CKPT_DIR:-$OUTPUT_DIR/checkpoints/$EXPERIMENT}"
NNODES="${NNODES:-16}"
NPUS_PER_NODE="${NPUS_PER_NODE:-8}"
DRY_RUN="${DRY_RUN:-0}"
CLUSTER_CHECK="${CLUSTER_CHECK:-1}"
PYTHON="${PYTHON:-python3}"

die() { echo "dapo_qwen25_32b_npu.sh: error: $*" >&2; exit 2; }
is_positive_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_positive_int "$NNODES" || die "NNODES='$NNODES' must be a positive integer (nodes in the Ray cluster, e.g. 16)"
is_positive_int "$NPUS_PER_NODE" || die "NPUS_PER_NODE='$NPUS_PER_NODE' must be a positive integer (cards per node, e.g. 8)"
case "$DRY_RUN" in 0|1) ;; *) die "DRY_RUN='$DRY_RUN' must be 0 or 1" ;; esac
case "$CLUSTER_CHECK" in 0|1) ;; *) die "CLUSTER_CHECK='$CLUSTER_CHECK' must be 0 or 1" ;; esac
# Hydra splits unquoted override values on commas and whitespace: refuse such paths up front.
for name in MODEL_PATH TRAIN_FILE VAL_FILE CKPT_DIR EXPERIMENT; do
  value="${!name}"
  [[ "$value" =~ [[:space:],\'\"=] ]] && die "$name='$value' contains a space, comma, quote or '='; use a path without them"
done
# The trainer mode among the overrides (the last one wins, as in Hydra), and the preset a user already chose.
MODE=sync
PRESET_GIVEN=0
for arg in "$@"; do
  case "$arg" in
    trainer.v1.trainer_mode=*|++trainer.v1.trainer_mode=*) MODE="${arg#*=}" ;;
    pools=*|+pools=*|++pools=*) PRESET_GIVEN=1 ;;
  esac
done
MODE_ARGS=()
TRAIN_NNODES="$NNODES"
if [[ "$MODE" == "separate_async" ]]; then
  ROLLOUT_NNODES="${ROLLOUT_NNODES:-12}"
  is_positive_int "$ROLLOUT_NNODES" || die "ROLLOUT_NNODES='$ROLLOUT_NNODES' must be a positive integer (nodes of the rollout pool, e.g. 12)"
  (( ROLLOUT_NNODES < NNODES )) || die "ROLLOUT_NNODES=$ROLLOUT_NNODES leaves no trainer node of NNODES=$NNODES; accepted: 1 to $((NNODES - 1))"
  TRAIN_NNODES=$((NNODES - ROLLOUT_NNODES))
  [[ "$PRESET_GIVEN" == "1" ]] || MODE_ARGS+=(+pools=npu_separate_128)
  MODE_ARGS+=("actor_rollout_ref.rollout.nnodes=$ROLLOUT_NNODES")
elif [[ -n "${ROLLOUT_NNODES:-}" ]]; then
  die "ROLLOUT_NNODES='$ROLLOUT_NNODES' is read only with trainer.v1.trainer_mode=separate_async (trainer mode here: $MODE)"
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON='$PYTHON' not found; set PYTHON to the interpreter where verl-ascend is installed"

# Importable from a checkout even when verl-ascend is not pip-installed.
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export DRY_RUN
# The cluster's node count, for the checks: separate_async's two pools must fit it (a script's own trainer.nnodes
# among the arguments adds to the rollout pool instead of splitting NNODES).
export VERL_ASCEND_CLUSTER_NNODES="$NNODES"
export VERL_ASCEND_OUTPUT_DIR="$OUTPUT_DIR"

if [[ "$DRY_RUN" == "1" ]]; then
  # Write nothing: no Hydra run folder, no log file.
  HYDRA_ARGS=(hydra.run.dir=. hydra.output_subdir=null hydra/job_logging=none hydra/hydra_logging=none)
else
  HYDRA_ARGS=("hydra.run.dir=$OUTPUT_DIR/hydra/$EXPERIMENT/$(date +%Y%m%d-%H%M%S)")
fi

JOB_ARGS=(
  --config-name dapo_qwen25_32b_npu
  "actor_rollout_ref.model.path=$MODEL_PATH"
  "data.train_files=$TRAIN_FILE"
  "data.val_files=$VAL_FILE"
  "trainer.nnodes=$TRAIN_NNODES"
  "trainer.n_gpus_per_node=$NPUS_PER_NODE"
  ${MODE_ARGS[@]+"${MODE_ARGS[@]}"}
  "trainer.experiment_name=$EXPERIMENT"
  "trainer.default_local_dir=$CKPT_DIR"
)

# More than one node: every node of the running Ray cluster checked for this job (stack, devices, the
# environment each worker receives, model/data/checkpoint folders, links, a bounded HCCL all-reduce)
# before anything loads; a finding stops here with the check's exit status (2).
if (( NNODES > 1 )) && [[ "$CLUSTER_CHECK" == "1" ]]; then
  if [[ "$DRY_RUN" == "1" ]]; then
    echo "# cluster check: NNODES=$NNODES > 1, so a real run first runs \`verl-ascend cluster\` with these overrides" \
      "on the running Ray cluster and stops on a finding (CLUSTER_CHECK=0 skips it)" >&2
  else
    status=0
    "$PYTHON" -m verl_ascend cluster "${JOB_ARGS[@]}" "$@" || status=$?
    if (( status != 0 )); then
      echo "dapo_qwen25_32b_npu.sh: the cluster is not ready for the job (verl-ascend cluster exit $status): nothing" \
        "was loaded; fix the findings above, or set CLUSTER_CHECK=0 to skip the check" >&2
      exit "$status"
    fi
  fi
fi

# `verl-ascend train`, run through $PYTHON so the interpreter named above is the one that trains.
exec "$PYTHON" -m verl_ascend train "${JOB_ARGS[@]}" "${HYDRA_ARGS[@]}" "$@"
