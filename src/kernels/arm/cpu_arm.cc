// ARM64 feature detection through the kernel's hardware capability bits.
#include <sys/auxv.h>

#include "kernels/cpu_features.h"

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif

namespace pocket {

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures kFeatures = [] {
    CpuFeatures f;
    f.neon = true;  // Advanced SIMD is part of ARMv8-A
    const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    f.dotprod = (hwcap & HWCAP_ASIMDDP) != 0;
    f.i8mm = f.dotprod && (hwcap2 & HWCAP2_I8MM) != 0;
    return f;
  }();
  return kFeatures;
}

}  // namespace pocket
