// What the CPU (and the operating system) lets us use. Detected once; ISA-specific probing lives
// in kernels/x86 and kernels/arm.
#pragma once

#include <string>

namespace pocket {

struct CpuFeatures {
  // x86-64
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ with the OS saving zmm state
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_vbmi = false;  // byte permutes (VPERMB, VPERMI2B)
  bool amx_int8 = false;     // AMX-TILE + AMX-INT8 (+ VBMI), with the OS granting tile data
  bool amx_bf16 = false;     // AMX-BF16 (with AMX-INT8 and AVX512-BF16)
  // ARM64
  bool neon = false;
  bool dotprod = false;  // SDOT / UDOT
  bool i8mm = false;     // SMMLA / USMMLA / USDOT

  std::string ToString() const;
};

// Probes the CPU once (AMX needs a permission request to the kernel, made here).
const CpuFeatures& DetectCpuFeatures();

}  // namespace pocket
