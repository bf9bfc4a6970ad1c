// x86-64 feature detection: CPUID plus XGETBV (the OS must save the vector state), and the Linux
// permission request for AMX tile data.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "kernels/cpu_features.h"

namespace pocket {
namespace {

uint64_t Xgetbv() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool RequestAmxPermission() {
#if defined(__linux__)
  constexpr long kArchGetXcompPerm = 0x1022;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask & (1ul << kXfeatureXtiledata)) != 0;
#else
  return false;
#endif
}

CpuFeatures Probe() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = Xgetbv();
  const bool os_avx = (xcr0 & 0x6) == 0x6;          // xmm and ymm state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;     // plus opmask, zmm_hi256, hi16_zmm
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // xtilecfg, xtiledata
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1,
             avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1, vnni = (c >> 11) & 1,
             vbmi = (c >> 1) & 1, amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1,
             amx_bf16 = (d >> 22) & 1;
  unsigned a1 = 0, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool bf16 = (a1 >> 5) & 1;
  f.avx2 = os_avx && avx2 && fma && f16c;
  f.avx512 = f.avx2 && os_avx512 && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && vnni;
  f.avx512_bf16 = f.avx512 && bf16;
  f.avx512_vbmi = f.avx512 && vbmi;
  // The AMX table also uses VBMI byte permutes (every CPU with AMX has them).
  f.amx_int8 =
      f.avx512_vnni && f.avx512_vbmi && os_amx && amx_tile && amx_int8 && RequestAmxPermission();
  f.amx_bf16 = f.amx_int8 && f.avx512_bf16 && amx_bf16;
  return f;
}

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures kFeatures = Probe();  // immutable after the first call
  return kFeatures;
}

}  // namespace pocket
