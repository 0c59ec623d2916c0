#!/usr/bin/env bash
# oneDNN's matmul primitive against braid's float GEMM path (dnnl_sgemm panels) on the benchmark models' GEMMs
# (scripts/bench/gemm_matmul.cpp; needs libdnnl-dev). usage: scripts/bench/gemm_matmul.sh [CALLS=400]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
g++ -O2 -fopenmp "$here/gemm_matmul.cpp" -o "$out/gemm_matmul" -ldnnl
echo "$(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=1000 "$out/gemm_matmul" "$@"
