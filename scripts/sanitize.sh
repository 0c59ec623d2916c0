#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (docs/testing.md, "Sanitizers"):
# builds build-asan/ (-DBRAID_SANITIZE=ON, CUDA off, RelWithDebInfo) and runs CTest there. Any report (a
# memory error, a leak, undefined behaviour) aborts the process it happens in, so the test that ran it fails.
#   scripts/sanitize.sh              every CPU test (about N minutes on 2 cores; see docs/testing.md)
#   scripts/sanitize.sh --unit       the GoogleTest suites only (label unit; what CI runs)
#   scripts/sanitize.sh -R Signals   any further arguments go to ctest
#   scripts/sanitize.sh --thread     ThreadSanitizer instead (build-tsan/, -DBRAID_TSAN=ON): the engine's threads
#                                    (devices, comm threads: gradient buckets, ZeRO-3's prefetched gathers), the
#                                    in-process communicators; OMP_NUM_THREADS=1 (libgomp is not instrumented)
# Environment: BRAID_ASAN_BUILD (default build-asan), BRAID_TSAN_BUILD (default build-tsan), BRAID_JOBS (default:
# all cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BRAID_ASAN_BUILD:-$root/build-asan}
jobs=${BRAID_JOBS:-$(nproc)}
targets=()
ctest_args=()
if [ "${1:-}" = "--thread" ]; then
  shift
  build=${BRAID_TSAN_BUILD:-$root/build-tsan}
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WITH_CUDA=OFF -DBRAID_TSAN=ON >/dev/null
  cmake --build "$build" -j "$jobs" --target test_exec test_core
  # halt_on_error: a report ends the process (the test fails). OpenMP off: its runtime's barriers are invisible to
  # TSan (reports inside libgomp would be false); what is checked is braid's own threads.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
  export OMP_NUM_THREADS=1
  cd "$build"
  if [ $# -eq 0 ]; then
    set -- -R '^(Zero|SequenceParallel|Recompute|Memory|Pipeline|Comm|Placement|RunPlan|Executor)'
  fi
  ctest --output-on-failure -j "$jobs" --timeout 1800 -L unit "$@"
  exit
fi
if [ "${1:-}" = "--unit" ]; then
  shift
  targets=(test_core test_io test_ops test_graph test_exec test_planner)
  ctest_args=(-L unit)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WITH_CUDA=OFF -DBRAID_SANITIZE=ON >/dev/null
cmake --build "$build" -j "$jobs" ${targets[@]+--target "${targets[@]}"}
# detect_leaks: LeakSanitizer at exit; abort_on_error: a report ends the process with SIGABRT (never a pass).
# Suppressions name third-party libraries only (tests/sanitize/lsan.supp says why each is there).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 1800 ${ctest_args[@]+"${ctest_args[@]}"} "$@"
