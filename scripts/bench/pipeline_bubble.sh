#!/usr/bin/env bash
# Measured pipeline bubble beside the textbook one: tiny_gpt with 4 decoder blocks as a 4-stage pipeline on
# cpu:4 (one block per stage; embeddings with the first, the head with the last), 8 micro-batches, under
# 1F1B and GPipe, traced with `braid train --trace`; scripts/bench/bubble.py reads each device's idle
# fraction from the trace. Usage: scripts/bench/pipeline_bubble.sh [BRAID] [STEPS]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
braid="${1:-$here/build/braid}"
steps="${2:-8}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
for schedule in 1f1b gpipe; do
  cat > "$work/plan.yaml" <<PLAN
summary: {devices: 4, data_parallel: 1, tensor_parallel: 1, pipeline_stages: 4, virtual_stages: 1,
          micro_batch: 2, micro_batches: 8, schedule: $schedule}
stages:
  - {devices: [0], mesh: [1, 1], first_layer: tok, last_layer: h.0.res2}
  - {devices: [1], mesh: [1, 1], first_layer: h.1.ln1, last_layer: h.1.res2}
  - {devices: [2], mesh: [1, 1], first_layer: h.2.ln1, last_layer: h.2.res2}
  - {devices: [3], mesh: [1, 1], first_layer: h.3.ln1, last_layer: loss}
PLAN
  "$braid" train "$here/configs/tiny_gpt.yaml" --no-progress --set devices=cpu:4 --set parallel.plan="$work/plan.yaml" \
    --set vars.n_layer=4 --set train.batch=16 --set train.steps="$steps" --set eval.every_steps=0 \
    --set log.metrics="$work/metrics.jsonl" --trace "$work/trace.json" > "$work/log.txt"
  echo "== $schedule"
  "$py" "$here/scripts/bench/bubble.py" "$work/trace.json" --stages 4 --micro-batches 8
done
