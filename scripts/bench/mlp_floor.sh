#!/usr/bin/env bash
# The MLP benchmark against its floor and the SGEMM ceiling, side by side (issue 23): per round, the two-thread
# dnnl_sgemm ceiling (scripts/bench/sgemm_ceiling.cpp, as vs_pytorch.sh measures it), the floor (scripts/bench/
# mlp_floor.cpp: the step's GEMMs on braid's panels and the SGD update alone, no framework, OpenMP threads
# spinning) and `braid bench configs/bench/mlp.yaml`, in turn. Prints each round and the medians (min-max over
# rounds) of braid / floor, floor / ceiling and braid / ceiling: how much of the gap to the ceiling is braid's and
# how much the GEMM library's on these shapes. Needs g++, libdnnl-dev and a built braid.
# usage: scripts/bench/mlp_floor.sh [--rounds R=5] [--steps N=300] [--warmup W=20] [--window K=10]
#        BRAID=path/to/braid overrides build/braid.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
ROUNDS=5 STEPS=300 WARMUP=20 WINDOW=10
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    *) echo "mlp_floor.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$BRAID" ] || { echo "mlp_floor.sh: $BRAID not found; build it first or set BRAID" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -fopenmp "$ROOT/scripts/bench/sgemm_ceiling.cpp" -o "$tmp/ceiling" -ldnnl
g++ -O3 -march=native -fopenmp "$ROOT/scripts/bench/mlp_floor.cpp" -o "$tmp/floor" -ldnnl
threads=${OMP_NUM_THREADS:-$(nproc)}
echo "$(date -u '+%F %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  OMP_NUM_THREADS=$threads "$tmp/ceiling" 5 >"$tmp/ceiling_$r.json"
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=active "$tmp/floor" "$STEPS" "$WARMUP" "$WINDOW" >"$tmp/floor_$r.json"
  "$BRAID" bench "$ROOT/configs/bench/mlp.yaml" --steps "$STEPS" --warmup "$WARMUP" --window "$WINDOW" \
    --json "$tmp/braid_$r.json" >/dev/null
done
/usr/bin/python3 - "$tmp" "$ROUNDS" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for r in range(1, rounds + 1):
    c = json.load(open(f"{tmp}/ceiling_{r}.json"))["ceiling_gflops"]
    f = json.load(open(f"{tmp}/floor_{r}.json"))
    b = json.load(open(f"{tmp}/braid_{r}.json"))["rows"][0]
    # braid's FLOPs per step also count the elementwise work the floor leaves out; the GEMMs' are the same
    rows.append((c, f["gflops"], b["achieved_gflops"], f["op_ms"]))
print(f"{'round':>5} {'ceiling':>8} {'floor':>8} {'braid':>8}  {'braid/floor':>11} {'floor/ceil':>10} {'braid/ceil':>10}   GFLOP/s")
for k, (c, f, b, _) in enumerate(rows, 1):
    print(f"{k:5d} {c:8.1f} {f:8.1f} {b:8.1f}  {b / f:11.3f} {f / c:10.3f} {b / c:10.3f}")
def stat(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"
print(f"median (min-max): braid/floor {stat([b / f for _, f, b, _ in rows])}, floor/ceiling "
      f"{stat([f / c for c, f, _, _ in rows])}, braid/ceiling {stat([b / c for c, _, b, _ in rows])}")
names = list(rows[0][3])
print("floor's ops, median ms over rounds: " + ", ".join(f"{n} {statistics.median(r[3][n] for r in rows):.3f}" for n in names))
PY
