#!/usr/bin/env bash
# The MLP benchmark's GEMMs with warm and cold caches (issue 23): scripts/bench/gemm_cold.cpp, each GEMM timed after
# sweeping S MiB through the caches, for S = 0 (a loop of the same call) to 64; printed as ms and as the slowdown
# against S = 0. Needs g++ and libdnnl-dev.
# usage: scripts/bench/gemm_cold.sh [reps=200] [MiB ...]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O3 -march=native -fopenmp "$ROOT/scripts/bench/gemm_cold.cpp" -o "$tmp/gemm_cold" -ldnnl
threads=${OMP_NUM_THREADS:-$(nproc)}
echo "$(date -u '+%F %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads, L3 $(lscpu | awk -F: '/L3/ {print $2}' | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=active "$tmp/gemm_cold" "$@" >"$tmp/out.json"
/usr/bin/python3 - "$tmp/out.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
names = list(j["ms"])
sizes = list(j["ms"][names[0]])
print(f"{'GEMM (M x N x K)':26} " + " ".join(f"{s + ' MiB':>9}" for s in sizes) + "   (ms; in brackets: / 0 MiB)")
for n in names:
    row = j["ms"][n]
    base = row[sizes[0]]
    print(f"{n:26} " + " ".join(f"{row[s]:9.3f}" for s in sizes))
    print(f"{'':26} " + " ".join(f"{'(' + format(row[s] / base, '.2f') + ')':>9}" for s in sizes))
PY
