#!/usr/bin/env bash
# Single-threaded sgemm of OpenBLAS against oneDNN on the panels braid's GEMM runs per thread, by thread CPU
# time (robust to a shared machine). This is the measurement behind BRAID_SGEMM's default (docs/benchmarks.md,
# "GEMM library"). Needs libopenblas-openmp-dev and libdnnl-dev (both installed by scripts/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
g++ -O2 -I/usr/include/x86_64-linux-gnu/openblas-openmp "$here/gemm_panels.cpp" -o "$out/gemm_panels" \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl
echo "$(date -u '+%F %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg); GFLOP/s per core by thread CPU time"
OMP_NUM_THREADS=1 "$out/gemm_panels"
