#!/usr/bin/env bash
# The benchmark models' float GEMMs (MLP: batch 256, 784-1024-1024-10; GPT: 2048 tokens, d 256, 4d 1024), single
# -threaded, on oneDNN and OpenBLAS, whole and in 2, 4 and 8 blocks of C (scripts/bench/gemm_blocks.cpp): natively
# and with both libraries capped to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, OPENBLAS_CORETYPE=Haswell). Behind braid's
# default library per ISA and its panel count (src/ops/cpu/kernel_util.cpp; docs/benchmarks.md).
#   scripts/bench/gemm_blocks.sh [M N K TT ...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(mktemp -d)/gemm_blocks"
inc=/usr/include/x86_64-linux-gnu/openblas-openmp lib=/usr/lib/x86_64-linux-gnu/openblas-openmp
g++ -O2 -I"$inc" "$root/scripts/bench/gemm_blocks.cpp" -o "$bin" -L"$lib" -lopenblas -ldnnl -Wl,-rpath,"$lib"
shapes=("$@")
((${#shapes[@]})) || shapes=(256 1024 784 NT 256 1024 1024 NN 1024 1024 256 TN 1024 784 256 TN
                             2048 768 256 NT 2048 256 1024 NT 2048 1024 256 NN 1024 256 2048 TN 256 1024 2048 TN)
echo "== native ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
OMP_NUM_THREADS=1 "$bin" "${shapes[@]}"
echo "== capped to AVX2"
OMP_NUM_THREADS=1 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell "$bin" "${shapes[@]}"
