#!/usr/bin/env bash
# braid setup: installs exactly the Debian packages the build, the tests and the default demo need (only
# those missing; safe to run again), then configures and builds. CUDA is used when nvcc is found.
#   scripts/setup.sh           install + build
#   scripts/setup.sh --test    install + build + run the whole test suite, then the unit suites under
#                              ASan+UBSan (what CI runs; BRAID_SANITIZE_TESTS=0 skips the sanitizer pass)
#   scripts/setup.sh --demo    install + build the braid binary alone + train configs/fashion_mlp.yaml on
#                              Fashion-MNIST (a first result in minutes; the rest builds on a later plain run)
# Environment: BUILD_DIR (default build), BRAID_JOBS (default: all cores), BRAID_WITH_CUDA (ON/OFF/auto).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
mode="${1:-build}"
jobs="${BRAID_JOBS:-$(nproc)}"

packages=(
  build-essential cmake ninja-build pkg-config         # toolchain
  libyaml-dev libcli11-dev libhdf5-dev zlib1g-dev  # model files, CLI, checkpoints, gzip datasets
  libsentencepiece-dev                                 # tokenizers (braid tokenize)
  libboost-dev libgtest-dev libopenblas-openmp-dev     # Asio (src/distributed), tests, CPU GEMM (OpenMP build)
  libdnnl-dev ocl-icd-opencl-dev                       # CPU float GEMM (oneDNN, faster single-threaded here;
                                                       # its CMake config requires OpenCL, only recommended)
  dataset-fashion-mnist                                # the default demo's data
)
if [[ "$mode" != --demo ]]; then  # the demo trains with the binary alone
  packages+=(
    python3 python3-torch python3-numpy python3-h5py python3-yaml  # PyTorch reference tests
    python3-matplotlib                                   # scripts/bench plots
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  t0=$SECONDS
  echo "setup: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then sudo=sudo; else sudo=; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "setup: packages installed in $((SECONDS - t0)) s"
fi

cuda_flag=()
if [[ -n "${BRAID_WITH_CUDA:-}" && "${BRAID_WITH_CUDA}" != auto ]]; then
  cuda_flag=(-DBRAID_WITH_CUDA="${BRAID_WITH_CUDA}")
elif ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cuda_flag=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi

t0=$SECONDS
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}"
if [[ "$mode" == --demo ]]; then
  cmake --build "$build" -j "$jobs" --target braid  # the demo needs the binary alone: no tests, no CUDA module
else
  cmake --build "$build" -j "$jobs"
fi
echo "setup: configured and built in $((SECONDS - t0)) s"

case "$mode" in
  build) ;;
  --test)
    cd "$build"
    ctest --output-on-failure -j "$jobs" --timeout 900
    # Then the GoogleTest suites again under AddressSanitizer + UBSan (build-asan/, CPU only; docs/testing.md):
    # memory errors and undefined behaviour are found by the tool. BRAID_SANITIZE_TESTS=0 skips it.
    if [[ "${BRAID_SANITIZE_TESTS:-1}" != 0 ]]; then
      BRAID_ASAN_BUILD="${BRAID_ASAN_BUILD:-$root/build-asan}" BRAID_JOBS="$jobs" "$root/scripts/sanitize.sh" --unit
    fi
    ;;
  --demo)
    cd "$root"
    "$build/braid" train configs/fashion_mlp.yaml
    ;;
  *) echo "setup: unknown mode '$mode' (use --test or --demo)" >&2; exit 2 ;;
esac
