#!/usr/bin/env bash
# Measures OpenBLAS against oneDNN and BLIS on the GEMMs of the benchmark models, at 1 and 2 threads
# (needs libopenblas-openmp-dev, the OpenBLAS build braid links, libdnnl-dev and libblis-openmp-dev; the
# last two only for this measurement). usage: scripts/bench/gemm_libs.sh [REPETITIONS=9]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
g++ -O2 -c -I/usr/include/x86_64-linux-gnu/blis-openmp "$here/gemm_libs_blis.cpp" -o "$out/blis.o"
g++ -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp "$here/gemm_libs.cpp" "$out/blis.o" -o "$out/gemm_libs" \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl \
  -L/usr/lib/x86_64-linux-gnu/blis-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/blis-openmp -lblis
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} "$out/gemm_libs" "$@"
