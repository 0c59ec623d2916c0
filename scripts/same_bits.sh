#!/usr/bin/env bash
# The same bits on any thread count, at every instruction set braid dispatches to: trains each shipped model
# family for 20 steps at 1, 2 and 3 threads under each ISA cap (braid's loops, oneDNN and OpenBLAS capped alike:
# docs/testing.md) and compares the checksums of every tensor of the step-20 checkpoint (parameters, optimizer
# state, buffers; `braid inspect`). Prints one row per model and cap; exits 1 if any thread count differs.
#   scripts/same_bits.sh [--build DIR] [--steps N] [--configs "a b"] [--caps "native avx2 baseline"]
# Caps above what the CPU has are skipped (and said so). CTest runs it (SameBits.Checkpoints).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build" steps=20
configs="fashion_mlp fashion_lenet fashion_resnet tiny_gpt"
caps="native avx2 baseline"
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --caps) caps="$2"; shift 2 ;;
    *) echo "same_bits.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
braid="$build/braid"
[[ -x "$braid" ]] || { echo "same_bits.sh: no braid binary at $braid (build first)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
has() { grep -qw "$1" /proc/cpuinfo; }
status=0
printf '%-16s %-9s %-10s %-10s %-10s %s\n' model cap 1-thread 2-threads 3-threads result
for cap in $caps; do
  env_cap=()
  case "$cap" in
    native) ;;
    avx2) has avx2 || { echo "(cap avx2: this CPU has no AVX2; skipped)"; continue; }
          env_cap=(BRAID_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell) ;;
    baseline) env_cap=(BRAID_CPU_ISA=baseline ONEDNN_MAX_CPU_ISA=SSE41 OPENBLAS_CORETYPE=Nehalem) ;;
    *) echo "same_bits.sh: unknown cap '$cap' (native, avx2, baseline)" >&2; exit 2 ;;
  esac
  for cfg in $configs; do
    sums=()
    for t in 1 2 3; do
      d="$work/$cfg-$cap-$t"
      mkdir -p "$d"
      if ! env "${env_cap[@]}" OMP_NUM_THREADS=$t "$braid" train "$root/configs/$cfg.yaml" --no-progress \
          --set train.steps="$steps" --set checkpoint.dir="$d/ck" --set log.metrics="$d/metrics.jsonl" \
          --stop-after "$steps" > "$d/log" 2>&1; then
        echo "same_bits.sh: $cfg ($cap, $t threads) failed:" >&2; tail -5 "$d/log" >&2; exit 1
      fi
      sums+=("$("$braid" inspect "$d/ck" | grep '^/' | awk '{print $1, $NF}' | md5sum | cut -c1-8)")
    done
    result=same
    [[ "${sums[0]}" == "${sums[1]}" && "${sums[0]}" == "${sums[2]}" ]] || { result=DIFFER; status=1; }
    printf '%-16s %-9s %-10s %-10s %-10s %s\n' "$cfg" "$cap" "${sums[@]}" "$result"
  done
done
exit $status
