#!/usr/bin/env bash
# Checkpoint save and load speed next to dd on the same disk in the same run (issue 3's benchmark; not a test;
# target >= 0.5x dd). Builds scripts/bench/ckpt_speed.cpp against build/'s braid_io and braid_core and runs it:
# a 100M-parameter checkpoint with AdamW state, saved and loaded three times, each run interleaved with dd
# writing the same bytes (from a copy in /dev/shm, conv=fsync) and reading them (cache dropped for the file;
# also iflag=direct).
# Usage: scripts/bench/ckpt_speed.sh [DIR (default build/bench_ckpt)] [PARAMS_MILLIONS (100)] [RUNS (3)];
# BUILD=... for another build folder. The page cache is dropped per file (posix_fadvise / dd iflag=nocache):
# dropping all caches needs privileges a benchmark should not ask for.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD:-$root/build}"
dir="${1:-$build/bench_ckpt}"
[ -f "$build/build.ninja" ] || { echo "no build in $build: configure it first (cmake -G Ninja ...)" >&2; exit 2; }
ninja -C "$build" braid_io braid_core >/dev/null
mkdir -p "$dir"
g++ -O2 -std=c++20 -fopenmp -I"$root/src" $(pkg-config --cflags hdf5) "$here/ckpt_speed.cpp" -o "$dir/ckpt_speed" \
  "$build/src/io/libbraid_io.a" "$build/src/core/libbraid_core.a" $(pkg-config --libs hdf5) -lyaml -lz
echo "disk: $(df -h "$dir" | awk 'NR==2 {print $1 " mounted on " $6 ", " $4 " free"}'); $(nproc) cores"
"$dir/ckpt_speed" "$dir" "${2:-100}" "${3:-3}"
