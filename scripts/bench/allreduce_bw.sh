#!/usr/bin/env bash
# TCP all-reduce bus bandwidth on loopback for 1-256 MiB, for 2 and 4 processes, beside a plain TCP stream
# between the same processes in the same run (issue 7's benchmark; not a test; target busbw >= 0.7x stream),
# with the automatic transport (shared memory between ranks of this host unless BRAID_DIST_SHM says otherwise)
# and with sockets only, interleaved. Builds scripts/bench/allreduce_bw.cpp against build/'s libraries and runs
# it under braid launch; prints a table per process count and writes scripts/bench/out/allreduce_bw_<N>.csv.
# Usage: scripts/bench/allreduce_bw.sh [MIN_MIB (1)] [MAX_MIB (256)] [REPS (5)] [NPROCS ("2 4")];
# BUILD=... for another build folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-$root/build}"
[ -f "$build/build.ninja" ] || { echo "no build in $build: configure it first (cmake -G Ninja ...)" >&2; exit 2; }
ninja -C "$build" braid braid_distributed >/dev/null
out="$here/out"
mkdir -p "$out" "$build/bench_allreduce"
exe="$build/bench_allreduce/allreduce_bw"
libs=(dist exec planner graph ops io core)
g++ -O2 -std=c++20 -fopenmp -I"$root/src" "$here/allreduce_bw.cpp" -o "$exe" \
  $(for l in "${libs[@]}"; do echo "$build/src/$l/libbraid_$l.a"; done) \
  $(pkg-config --libs hdf5 2>/dev/null || echo -lhdf5_serial) -lyaml -lz -lopenblas -lpthread
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for n in ${4:-2 4}; do
  echo "== $n processes"
  "$build/braid" launch --nproc "$n" -- "$exe" "$out/allreduce_bw_$n.csv" "${1:-1}" "${2:-256}" "${3:-5}" 2>&1 \
    | sed -n 's/^\[rank 0\] //p'
done
