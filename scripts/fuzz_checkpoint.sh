#!/usr/bin/env bash
# Builds the checkpoint fuzzer (clang, libFuzzer, ASan+UBSan; fuzz/checkpoint_fuzz.cpp) in build-fuzz/ and runs
# it for SECONDS (default 60). Its corpus is seeded with real checkpoints the fuzzer writes itself (plain, and
# resealed so that mutations get past the checksums to the index decoder). Crashes, leaks and slow or
# memory-hungry inputs are written to build-fuzz/findings-checkpoint/.
# Usage: scripts/fuzz_checkpoint.sh [SECONDS] [more libFuzzer flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
build=${BRAID_FUZZ_BUILD:-$root/build-fuzz}

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DBRAID_FUZZ=ON -DBRAID_WITH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j"${BRAID_FUZZ_JOBS:-2}" checkpoint_fuzz

corpus=$build/fuzz-corpus-checkpoint
findings=$build/findings-checkpoint
mkdir -p "$corpus" "$findings"
BRAID_FUZZ_SEEDS=$corpus "$build/fuzz/checkpoint_fuzz" -runs=1 "$findings" >/dev/null 2>&1 || true

cd "$findings"
exec "$build/fuzz/checkpoint_fuzz" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=256 -max_len=$((1 << 21)) -print_final_stats=1 "$@"
