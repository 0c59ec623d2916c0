#!/usr/bin/env bash
# oneDNN's convolution primitives on plain layouts against its own (blocked, with reorders) on the benchmark
# shapes, one thread, by thread CPU time (robust to a shared machine): the measurement behind the layouts
# src/ops/cpu/onednn_spatial.cpp asks for (docs/benchmarks.md, "Convolution and pooling on oneDNN").
# Needs libdnnl-dev (installed by scripts/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
g++ -O2 -std=c++17 -fopenmp "$here/conv_primitives.cpp" -o "$out/conv_primitives" -ldnnl
echo "$(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg); ms per batch of 128 (chunks of 8), 1 thread CPU time"
OMP_NUM_THREADS=1 "$out/conv_primitives"
