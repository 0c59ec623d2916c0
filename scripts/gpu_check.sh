#!/usr/bin/env bash
# One command on a GPU machine: configure a CUDA build for sm_90, build, run the `gpu`-labelled tests, then the
# GPT-2-124M-class benchmark (braid, fp32 forward+backward) and the same model in PyTorch eager on the same
# GPU, and print one table: tokens/s each, ratio, MFU. Sized for under 8 minutes; every step has a timeout.
# MFU = tokens/s * 6 * (N_params + 2 * L * T * d_attn_flops_term) / dense peak; see docs/benchmarks.md.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
BATCH=${BATCH:-4}
step() { echo "== $*"; }
step configure
timeout 120 cmake -S . -B "$BUILD" -G Ninja -DBRAID_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
step build
timeout 300 ninja -C "$BUILD" -j"$(nproc)" test_gpu >/dev/null || { echo "build failed"; exit 1; }
step "ctest -L gpu"
timeout 180 ctest --test-dir "$BUILD" -L gpu --output-on-failure -j1 | tail -25
step benchmark
B=$(BRAID_GPU_BENCH=1 BRAID_GPU_BENCH_BATCH=$BATCH timeout 120 "$BUILD/tests/test_gpu" --gtest_filter=GpuBench.* 2>&1 | grep '^BENCH' || true)
T=$(timeout 120 python3 scripts/bench/torch_gpt2.py --batch "$BATCH" 2>&1 | grep '^TORCH' || true)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
python3 - "$B" "$T" "$GPU" <<'PY'
import re, sys
b, t, gpu = sys.argv[1], sys.argv[2], sys.argv[3]
get = lambda s, k: float(re.search(k + r"=([0-9.]+)", s).group(1)) if re.search(k + r"=([0-9.]+)", s) else None
bt, tt, n = get(b, "tokens_per_s"), get(t, "tokens_per_s"), get(b, "params") or 163e6
L, T, D = 12, 1024, 768
flops_per_token = 6 * n + 6 * L * T * D  # dense 6N, plus causal attention (12 L T d, halved by the mask)
peak = 756e12 if "PCIe" in gpu else 989.4e12  # H100/H200 SXM dense bf16; fp32 runs are measured against it too
fmt = lambda x: f"{x:,.0f}" if x else "n/a"
mfu = lambda x: f"{100 * x * flops_per_token / peak:.1f}%" if x else "n/a"
print(f"{'':8} {'tokens/s':>12} {'MFU':>7}   ({gpu or 'unknown GPU'}, fp32, batch from BATCH, seq 1024)")
print(f"{'braid':8} {fmt(bt):>12} {mfu(bt):>7}")
print(f"{'pytorch':8} {fmt(tt):>12} {mfu(tt):>7}")
print(f"ratio braid/pytorch: {bt / tt:.2f}" if bt and tt else "ratio: n/a")
PY
