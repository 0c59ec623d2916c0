#!/usr/bin/env bash
# Measures OpenBLAS against oneDNN for the GEMM shapes braid's models use (needs libdnnl-dev and libopenblas-openmp-dev, the OpenBLAS build braid links).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
g++ -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp "$here/gemm_libs.cpp" -o "$out/gemm_libs" \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl
"$out/gemm_libs"
