#include "core/cpu_isa.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace braid {

CpuIsa cpu_isa_native() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return CpuIsa::avx512;
  if (__builtin_cpu_supports("avx2")) return CpuIsa::avx2;
#endif
  return CpuIsa::baseline;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512:
      return "avx512";
    case CpuIsa::avx2:
      return "avx2";
    default:
      return "baseline";
  }
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
    const CpuIsa native = cpu_isa_native();
    const char* v = std::getenv("BRAID_CPU_ISA");
    if (!v || !*v) return native;
    const std::string_view s = v;
    CpuIsa cap;
    if (s == "baseline") cap = CpuIsa::baseline;
    else if (s == "avx2") cap = CpuIsa::avx2;
    else if (s == "avx512") cap = CpuIsa::avx512;
    else {
      std::fprintf(stderr, "braid: warning: BRAID_CPU_ISA=%s is not one of baseline, avx2, avx512; using %s\n", v,
                   cpu_isa_name(native));
      return native;
    }
    return static_cast<int>(cap) < static_cast<int>(native) ? cap : native;
  }();
  return isa;
}

}  // namespace braid
