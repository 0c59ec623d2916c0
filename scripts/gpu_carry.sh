#!/usr/bin/env bash
# Build here, run on the GPU machine: builds test_gpu (and the braid CLI) with CUDA for sm_90 into build-gpu, then
# assembles .gpucarry/ in the repository root (ignored by git): bin/ with the binaries and the CUDA module
# (strip --strip-debug), lib/
# with their non-CUDA, non-glibc shared libraries (ldd, copied through links), and source_dir (the path compiled
# into the binaries). OpenBLAS (36 MB) is replaced by Debian's reference BLAS under OpenBLAS's file name: braid
# calls only cblas_sgemm / cblas_dgemm, and the device tool carries at most 64 MiB. Fails above 60 MiB.
# CUDA, cuBLAS, cuDNN and NCCL come from the GPU machine (scripts/gpu_check.sh finds them).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
CARRY=.gpucarry
REF_BLAS=/usr/lib/x86_64-linux-gnu/blas/libblas.so.3
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DBRAID_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# Without oneDNN (39 MB, over the carry limit with the rest): the CPU GEMM falls back to OpenBLAS, which is all
# the GPU checks need. Set on every run, so that a build folder configured before the option existed follows.
cmake -S . -B "$BUILD" -DBRAID_WITH_ONEDNN=OFF >/dev/null
nice -n 10 ninja -C "$BUILD" -j"${JOBS:-2}" test_gpu braid
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/lib"
# braid loads the CUDA backend from libbraid_cuda.so beside it (exec/backend.h): it travels in bin/ too.
bins=("$BUILD/tests/test_gpu" "$BUILD/braid" "$BUILD/libbraid_cuda.so")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "gpu_carry: $b was not built"; exit 1; }
  cp -L "$b" "$CARRY/bin/"
  strip --strip-debug "$CARRY/bin/$(basename "$b")"
done
# Shared libraries of the binaries, minus glibc (the GPU machine's own) and CUDA's (found there).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink|libcurand|libcusparse|libcufft|libnvToolsExt)'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  if [[ "$name" == libopenblas.so.0 ]]; then
    [ -f "$REF_BLAS" ] || { echo "gpu_carry: $REF_BLAS missing (apt-get install libblas3)"; exit 1; }
    [ "$(nm -D "$REF_BLAS" | grep -c ' T cblas_sgemm$')" -gt 0 ] || { echo "gpu_carry: $REF_BLAS has no cblas_sgemm"; exit 1; }
    cp -L "$REF_BLAS" "$CARRY/lib/libopenblas.so.0"
  else
    cp -L "$path" "$CARRY/lib/$name"
  fi
  strip --strip-debug "$CARRY/lib/$name" 2>/dev/null || true
done
# Only cblas_sgemm / cblas_dgemm may come from OpenBLAS (the reference BLAS has no openblas_* entry points).
if [ "$(nm -D --undefined-only "${bins[@]}" | grep -c ' U openblas_')" -gt 0 ]; then
  echo "gpu_carry: the binaries call openblas_* functions; the reference BLAS cannot stand in"; exit 1
fi
realpath . > "$CARRY/source_dir"
git rev-parse HEAD > "$CARRY/commit" 2>/dev/null || true
git check-ignore -q "$CARRY" || echo "gpu_carry: warning: $CARRY is not ignored by git (.gitignore lists it)"
total=$(du -sb "$CARRY" | cut -f1)
echo "gpu_carry: $CARRY holds $(ls "$CARRY/bin" | tr '\n' ' ')+ $(ls "$CARRY/lib" | wc -l) libraries, $((total / 1048576)) MiB"
ls -l "$CARRY/bin" "$CARRY/lib" | awk 'NF > 5 {printf "  %10d %s\n", $5, $NF}'
if [ "$total" -gt $((60 * 1048576)) ]; then echo "gpu_carry: over 60 MiB"; exit 1; fi
echo "gpu_carry: on the GPU machine run: bash scripts/gpu_check.sh   (carry: .gpucarry)"
