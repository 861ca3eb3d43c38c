#!/usr/bin/env bash
# The embedded default: full DAPO on a tiny Qwen2-architecture model, on a CPU, in minutes.
#
# It builds (once, deterministically, offline) a tiny model, its tokenizer and a task dataset,
# then trains with the recipe's `dapo_demo_cpu` config, and at the end plots reward, accuracy and
# response length per step into training.png next to the metrics. Every argument is passed through as an
# upstream-style Hydra override, e.g.:
#   bash examples/dapo_tiny_cpu.sh trainer.total_training_steps=5 data.train_batch_size=4
#   bash examples/dapo_tiny_cpu.sh +profile=cpu
#
# Environment:
#   VERL_ASCEND_TINY_DIR    where the tiny assets live   (default ~/.cache/verl-ascend/tiny)
#   VERL_ASCEND_OUTPUT_DIR  checkpoints and metrics      (default ./outputs)
#   VERL_FILE_LOGGER_PATH   metrics JSON lines           (default $VERL_ASCEND_OUTPUT_DIR/dapo_tiny_cpu/metrics.jsonl)
#   PYTHON                  interpreter with verl-ascend installed (default python); each step is a
#                           `verl-ascend` command, run as `$PYTHON -m verl_ascend` so no PATH is needed
set -euo pipefail
cd "$(dirname "$0")/.."

export VERL_ASCEND_TINY_DIR="${VERL_ASCEND_TINY_DIR:-$HOME/.cache/verl-ascend/tiny}"
export VERL_ASCEND_OUTPUT_DIR="${VERL_ASCEND_OUTPUT_DIR:-outputs}"
export PYTHONUNBUFFERED=1

PYTHON="${PYTHON:-python}"
"$PYTHON" -m verl_ascend assets --root "$VERL_ASCEND_TINY_DIR" >/dev/null
"$PYTHON" -m verl_ascend train --config-name dapo_demo_cpu "$@"
metrics="${VERL_FILE_LOGGER_PATH:-$VERL_ASCEND_OUTPUT_DIR/dapo_tiny_cpu/metrics.jsonl}"
if [ -f "$metrics" ]; then
    "$PYTHON" -m verl_ascend plot "$metrics"
fi
