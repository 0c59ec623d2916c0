#!/usr/bin/env bash
# Measures OpenBLAS against oneDNN for the GEMM shapes braid's models use (needs libdnnl-dev, libopenblas-dev).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
g++ -O2 "$here/gemm_libs.cpp" -o "$out/gemm_libs" -lopenblas -ldnnl
"$out/gemm_libs"
