#!/bin/bash
# Planner accuracy on this machine (issue 5): for each of cpu:2 and cpu:4, calibrate (`braid calibrate`, into a
# private cache so the user's profile is untouched), then for every (model, plan) pair of
# scripts/bench/plan_accuracy.py measure the step time with `braid bench` under that plan and compare it with
# the planner's prediction (bench prints both). Prints a table, the median absolute error, whether the
# planner's choice is the fastest measured or within 10% of it, and the machine's load before and after.
# Writes scripts/bench/out/plan_accuracy.csv.
#
# usage: scripts/bench/plan_accuracy.sh [--devices "2 4"] [--steps N] [--warmup W] [--repeat R] [--no-calibrate]
#        --repeat R: benchmark every pair R times, all pairs in turn, and keep the median of the medians (a shared
#        machine's bursts of other work); the default 1 is the plain measurement.
#        BRAID=path/to/braid overrides build/braid.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
DEVICES="2 4" STEPS=12 WARMUP=3 CALIBRATE=1 REPEAT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --devices) DEVICES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --no-calibrate) CALIBRATE=0; shift ;;
    *) echo "plan_accuracy.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$BRAID" ] || { echo "plan_accuracy.sh: $BRAID not found; build it first or set BRAID" >&2; exit 2; }
OUT=$ROOT/scripts/bench/out
WORK=$OUT/plan_accuracy
mkdir -p "$WORK"
export XDG_CACHE_HOME=$WORK/cache
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
rows=()
for n in $DEVICES; do
  if [ "$CALIBRATE" = 1 ]; then "$BRAID" calibrate --devices "cpu:$n" | grep -E "warning|profile written"; fi
  # The machine's speed now, against which each measurement's own reference run is compared (plan_accuracy.py).
  if [ "$CALIBRATE" = 1 ] || [ ! -f "$WORK/reference_cpu$n.txt" ]; then
    /usr/bin/python3 "$ROOT/scripts/bench/plan_accuracy.py" reference "$BRAID" "$ROOT" "$WORK" "$n"
  fi
  /usr/bin/python3 "$ROOT/scripts/bench/plan_accuracy.py" measure "$BRAID" "$ROOT" "$WORK" "$n" "$STEPS" "$WARMUP" "$REPEAT"
  rows+=("$WORK/rows_cpu$n.csv")
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
/usr/bin/python3 "$ROOT/scripts/bench/plan_accuracy.py" summarise "$OUT/plan_accuracy.csv" "${rows[@]}"
