// The instruction-set switch (core/cpu_isa.h) and the libraries' own caps: CTest runs the thread-count and
// same-bits suites again under BRAID_CPU_ISA=avx2 and =baseline with oneDNN and OpenBLAS capped alike
// (tests/CMakeLists.txt); this test checks that each cap took effect, so those runs check what they say.
#include <cblas.h>
#include <gtest/gtest.h>
#ifdef BRAID_HAVE_ONEDNN
#include <dnnl.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "core/cpu_isa.h"

using namespace braid;

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
}  // namespace

TEST(CpuIsa, TheCapIsHonouredByBraidAndTheLibraries) {
  const CpuIsa native = cpu_isa_native(), used = cpu_isa();
  const char* cap = std::getenv("BRAID_CPU_ISA");
  std::string note = std::string("native ") + cpu_isa_name(native) + ", braid's loops " + cpu_isa_name(used);
  if (!cap || !*cap) {
    EXPECT_EQ(used, native);
  } else {
    const std::string c = cap;
    const CpuIsa want = c == "baseline" ? CpuIsa::baseline : c == "avx2" ? CpuIsa::avx2 : CpuIsa::avx512;
    EXPECT_EQ(static_cast<int>(used), std::min(static_cast<int>(want), static_cast<int>(native))) << note;
  }
#ifdef BRAID_HAVE_ONEDNN
  const dnnl_cpu_isa_t d = dnnl_get_effective_cpu_isa();
  note += ", oneDNN isa " + std::to_string(static_cast<int>(d));
  // oneDNN's isa values are bit masks that grow with the set: a cap at AVX2 must leave no AVX-512 bit.
  if (used == CpuIsa::avx2) EXPECT_LE(static_cast<int>(d), static_cast<int>(dnnl_cpu_isa_avx2)) << note;
  if (used == CpuIsa::baseline) EXPECT_LE(static_cast<int>(d), static_cast<int>(dnnl_cpu_isa_sse41)) << note;
#endif
  const std::string core = lower(openblas_get_corename());
  note += ", OpenBLAS core " + core;
  if (const char* ct = std::getenv("OPENBLAS_CORETYPE"); ct && *ct && used != native)
    EXPECT_EQ(core, lower(ct)) << note;
  std::printf("%s\n", note.c_str());
}
