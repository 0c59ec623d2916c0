#!/bin/bash
# Loss curves: `braid train` once per point of the cartesian product of --sweep lists (each point's
# overrides passed as --set), each writing its JSON-lines metrics file (log.metrics) under OUT/NAME/, then
# one PNG with a loss curve per point (scripts/bench/plot.py loss; eval_loss dashed where the run evaluates).
# Points that braid refuses are listed in OUT/NAME.failed.txt and skipped.
#
# usage: scripts/bench/loss_sweep.sh [--out DIR] [--name NAME] [--every N] RUN... [--sweep key=v1,v2,...]...
#          [--set key=value]...
#   --every N   log.every_steps (default 5)
#   e.g. scripts/bench/loss_sweep.sh configs/bench/mlp.yaml --set train.steps=100 \
#          --sweep optimizer.lr=0.01,0.05 --sweep devices=cpu,cpu:2
#   BRAID=path/to/braid overrides build/braid.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
OUT=$ROOT/scripts/bench/out NAME=loss EVERY=5
RUNS=() SWEEPS=() SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --sweep) SWEEPS+=("$2"); shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    -*) echo "loss_sweep.sh: unknown argument $1" >&2; exit 2 ;;
    *) RUNS+=("$1"); shift ;;
  esac
done
[ ${#RUNS[@]} -gt 0 ] || { echo "loss_sweep.sh: give at least one run file" >&2; exit 2; }
[ -x "$BRAID" ] || { echo "loss_sweep.sh: $BRAID not found; build it first (ninja braid) or set BRAID" >&2; exit 2; }
DIR=$OUT/$NAME FAILED=$OUT/$NAME.failed.txt
rm -rf "$DIR" "$FAILED"
mkdir -p "$DIR"

points=("")
for s in "${SWEEPS[@]}"; do
  key=${s%%=*} values=${s#*=}
  [ "$key" != "$s" ] && [ -n "$values" ] || { echo "loss_sweep.sh: --sweep '$s': expected KEY=V1,V2,..." >&2; exit 2; }
  next=()
  IFS=, read -ra vs <<< "$values"
  for p in "${points[@]}"; do
    for v in "${vs[@]}"; do next+=("$p $key=$v"); done
  done
  points=("${next[@]}")
done

files=()
for run in "${RUNS[@]}"; do
  for p in "${points[@]}"; do
    label="$(basename "$run" .yaml)${p// /_}"
    label=${label//\//-}
    metrics="$DIR/$label.jsonl"
    sets=()
    for kv in $p; do sets+=(--set "$kv"); done
    echo "== $run$p"
    if "$BRAID" train "$run" "${SETS[@]}" "${sets[@]}" --set "log.metrics=$metrics" --set "log.every_steps=$EVERY" \
        --no-progress > "$DIR/$label.log" 2>&1; then
      tail -n 1 "$DIR/$label.log"
      files+=("$metrics")
    else
      rc=$?
      echo "   failed (exit $rc): $(grep -m1 -i 'error' "$DIR/$label.log" || grep -m1 -v '^$' "$DIR/$label.log" || true)"
      echo "$run$p: exit $rc: $(tr '\n' ' ' < "$DIR/$label.log")" >> "$FAILED"
    fi
  done
done
[ ${#files[@]} -gt 0 ] || { echo "loss_sweep.sh: every point failed; see $FAILED" >&2; exit 1; }
/usr/bin/python3 "$ROOT/scripts/bench/plot.py" loss "${files[@]}" -o "$OUT/$NAME.png"
