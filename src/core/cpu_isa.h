// Which x86 vector instruction set braid's own loops run with, and the dispatch that compiles a loop once per set.
//
// braid compiles its elementwise, reduction, optimizer and pooling loops three times: for AVX-512 (avx512f),
// AVX2 and the x86-64 baseline (SSE2), and picks one per call by cpu_isa(): the widest set the CPU has, capped by
// the environment variable BRAID_CPU_ISA=baseline|avx2|avx512. Results do not depend on the set taken: braid
// compiles without contraction (-ffp-contract=off) or reassociation (CMakeLists.txt), so every lane does the same
// IEEE operations in the same order as scalar code. The cap is how a machine with AVX-512 checks the AVX2 and
// baseline paths (tests/CMakeLists.txt runs the thread-count tests under each cap, with oneDNN and OpenBLAS
// capped alike: docs/testing.md).
//
// Not GCC's target_clones: its ifunc resolver picks by the CPU alone, at load time, so no switch could force a
// narrower path, and it ran before ThreadSanitizer's runtime was up (an instrumented resolver crashed there).
#pragma once

namespace braid {

enum class CpuIsa : int { baseline = 0, avx2 = 1, avx512 = 2 };

// The widest set this CPU has ("avx512" needs avx512f, "avx2" avx2), ignoring BRAID_CPU_ISA.
CpuIsa cpu_isa_native();
// The set braid's loops use: cpu_isa_native() capped by BRAID_CPU_ISA (read once; an unknown value is warned
// about on stderr and ignored; a cap above the CPU's set means the CPU's set).
CpuIsa cpu_isa();
const char* cpu_isa_name(CpuIsa isa);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define BRAID_CPU_DISPATCH 1
namespace detail {
// flatten inlines f's body and everything it calls that can be inlined, so the loops in it are compiled (and
// vectorised) for the wrapper's instruction set.
template <typename F>
__attribute__((target("avx512f"), flatten)) inline decltype(auto) run_avx512(const F& f) {
  return f();
}
template <typename F>
__attribute__((target("avx2"), flatten)) inline decltype(auto) run_avx2(const F& f) {
  return f();
}
template <typename F>
__attribute__((flatten)) inline decltype(auto) run_baseline(const F& f) {
  return f();
}
}  // namespace detail
#endif

// Runs f() (a lambda around a loop kernel: cpu_vec([&] { return kernel(x, n); })) compiled for cpu_isa().
// A switch on a value read once: call it per row or per chunk, not per element.
template <typename F>
inline decltype(auto) cpu_vec(const F& f) {
#ifdef BRAID_CPU_DISPATCH
  switch (cpu_isa()) {
    case CpuIsa::avx512:
      return detail::run_avx512(f);
    case CpuIsa::avx2:
      return detail::run_avx2(f);
    default:
      return detail::run_baseline(f);
  }
#else
  return f();
#endif
}

}  // namespace braid
