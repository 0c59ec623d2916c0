#!/usr/bin/env bash
# Builds the model-file fuzzer (clang, libFuzzer, ASan+UBSan) in build-fuzz/ and runs it for SECONDS
# (default 60), its corpus seeded from tests/bad and models/. Crashes and slow inputs are written to
# build-fuzz/findings/. Usage: scripts/fuzz_model.sh [SECONDS] [more libFuzzer flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
build=${BRAID_FUZZ_BUILD:-$root/build-fuzz}

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DBRAID_FUZZ=ON -DBRAID_WITH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j"${BRAID_FUZZ_JOBS:-2}" model_fuzz

corpus=$build/fuzz-corpus
findings=$build/findings
mkdir -p "$corpus" "$findings"
for dir in "$root/tests/bad" "$root/models"; do
  [ -d "$dir" ] || continue
  find "$dir" -type f -name '*.yaml' | while read -r f; do
    cp "$f" "$corpus/seed_$(basename "$(dirname "$f")")_$(basename "$f")"
  done
done

cd "$findings"
exec "$build/fuzz/model_fuzz" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -dict="$root/fuzz/model.dict" -print_final_stats=1 "$@"
