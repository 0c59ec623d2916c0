#!/bin/bash
# Throughput sweep: `braid bench` over the cartesian product of --sweep lists (devices, micro-batch, model
# size vars, plan files, ...), one process per point (so each row's peak RSS is that point's own), every row
# appended to one CSV (braid bench's columns; the `sweep` column holds the point's overrides, e.g.
# "devices=cpu:2 train.micro_batch=64"), then a PNG of throughput per point (scripts/bench/plot.py).
# A point that braid refuses (exit 2: e.g. a micro-batch that does not split over the devices, or a plan
# file before plans run) is listed in FAILED.txt beside the CSV and skipped; the sweep goes on.
#
# usage: scripts/bench/sweep.sh [--out DIR] [--name NAME] [--steps N] [--warmup W] [--window K]
#          [--x KEY] [--series KEY] [--metric COLUMN] RUN... [--sweep key=v1,v2,...]... [--set key=value]...
#   --out DIR    where NAME.csv, NAME.png and NAME.failed.txt go (default scripts/bench/out)
#   --x KEY      the sweep key on the plot's x axis (default: the first --sweep key); --series KEY: one
#                line per value of KEY (default: one line per combination of the other keys)
#   e.g. scripts/bench/sweep.sh configs/bench/mlp.yaml --sweep devices=cpu,cpu:2,cpu:4 \
#          --sweep train.micro_batch=64,256
#        scripts/bench/sweep.sh configs/bench/gpt.yaml --sweep parallel.plan=a.yaml,b.yaml --sweep devices=cpu:4
#   BRAID=path/to/braid overrides build/braid.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
OUT=$ROOT/scripts/bench/out NAME=sweep STEPS=20 WARMUP=3 WINDOW=5 X= SERIES= METRIC=samples_per_s_median
RUNS=() SWEEPS=() SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    --x) X=$2; shift 2 ;;
    --series) SERIES=$2; shift 2 ;;
    --metric) METRIC=$2; shift 2 ;;
    --sweep) SWEEPS+=("$2"); shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    -*) echo "sweep.sh: unknown argument $1" >&2; exit 2 ;;
    *) RUNS+=("$1"); shift ;;
  esac
done
[ ${#RUNS[@]} -gt 0 ] || { echo "sweep.sh: give at least one run file" >&2; exit 2; }
[ -x "$BRAID" ] || { echo "sweep.sh: $BRAID not found; build it first (ninja braid) or set BRAID" >&2; exit 2; }
mkdir -p "$OUT"
CSV=$OUT/$NAME.csv FAILED=$OUT/$NAME.failed.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rm -f "$CSV" "$FAILED"

# The points: every combination of the sweeps' values, each as a list of "--sweep key=value" arguments
# (a one-value sweep, so braid fills the CSV's `sweep` column exactly as one `braid bench --sweep` would).
points=("")
for s in "${SWEEPS[@]}"; do
  key=${s%%=*} values=${s#*=}
  [ "$key" != "$s" ] && [ -n "$values" ] || { echo "sweep.sh: --sweep '$s': expected KEY=V1,V2,..." >&2; exit 2; }
  next=()
  IFS=, read -ra vs <<< "$values"
  for p in "${points[@]}"; do
    for v in "${vs[@]}"; do next+=("$p --sweep $key=$v"); done
  done
  points=("${next[@]}")
done

n=0
for run in "${RUNS[@]}"; do
  for p in "${points[@]}"; do
    n=$((n + 1))
    echo "== [$n] $run$p"
    # shellcheck disable=SC2086  # $p is a list of "--sweep key=value" words (values have no spaces)
    if "$BRAID" bench "$run" $p "${SETS[@]}" --steps "$STEPS" --warmup "$WARMUP" --window "$WINDOW" \
        --csv "$TMP/row.csv" > "$TMP/log" 2>&1; then
      # The figure from bench's CSV row (its text line may carry a note, e.g. about other processes' load).
      /usr/bin/python3 "$ROOT/scripts/bench/plot.py" row "$TMP/row.csv"
      [ -f "$CSV" ] || head -n 1 "$TMP/row.csv" > "$CSV"
      tail -n +2 "$TMP/row.csv" >> "$CSV"
    else
      rc=$?
      echo "   failed (exit $rc): $(grep -m1 -i 'error' "$TMP/log" || grep -m1 -v '^$' "$TMP/log" || true)"
      echo "$run$p: exit $rc: $(tr '\n' ' ' < "$TMP/log")" >> "$FAILED"
    fi
    rm -f "$TMP/row.csv"
  done
done
[ -f "$CSV" ] || { echo "sweep.sh: every point failed; see $FAILED" >&2; exit 1; }
echo "CSV: $CSV"
[ -f "$FAILED" ] && echo "failed points: $FAILED"
args=(throughput "$CSV" -o "$OUT/$NAME.png" --metric "$METRIC")
[ -n "$X" ] && args+=(--x "$X")
[ -n "$SERIES" ] && args+=(--series "$SERIES")
/usr/bin/python3 "$ROOT/scripts/bench/plot.py" "${args[@]}"
