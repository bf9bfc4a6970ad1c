// ARMv8.2 dot-product kernels (SDOT): the packed matmul and the int8 ceiling; every float kernel
// is the baseline NEON table's (dot products add nothing there). Compiled with
// -march=armv8.2-a+dotprod and only called when the CPU has it. Bit-identical to the reference.
//
// SDOT by lane matches the packed layout: register j of a 64-byte code vector holds rows
// 4j..4j+3 with 4 codes each, so SDOT(acc[j], codes, activations, lane l) adds, for each of the
// four rows, the dot product of its quad with activation quad l of a 16-byte load. u4 codes
// (0..15) are valid signed bytes as they are; u8 codes are flipped to code - 128 and corrected by
// 128 * (sum of q) (kBiasedU8), exactly.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/arm/neon_common.h"
#include "kernels/kernel_table.h"
#include "kernels/tables.h"

namespace pocket {
namespace arm {
namespace {

// Code vector v (16 rows x one quad) against activation quad kLane of a[t], for kT tokens.
template <int kLane, int kT>
inline void SdotVector(const int8x16_t* w, const int8x16_t* a, int32x4_t (*acc)[4]) {
  for (int t = 0; t < kT; ++t)
    for (int j = 0; j < 4; ++j) acc[t][j] = vdotq_laneq_s32(acc[t][j], w[j], a[t], kLane);
}

template <int kLane, int kT>
inline void SdotU4Vector(const uint8_t* v, const int8x16_t* alo, const int8x16_t* ahi,
                         int32x4_t (*lo)[4], int32x4_t (*hi)[4]) {
  const uint8x16_t nib = vdupq_n_u8(0x0f);
  int8x16_t wl[4], wh[4];
  for (int j = 0; j < 4; ++j) {
    const uint8x16_t w = vld1q_u8(v + 16 * j);
    wl[j] = vreinterpretq_s8_u8(vandq_u8(w, nib));
    wh[j] = vreinterpretq_s8_u8(vshrq_n_u8(w, 4));
  }
  SdotVector<kLane, kT>(wl, alo, lo);
  SdotVector<kLane, kT>(wh, ahi, hi);
}

template <int kLane, int kT>
inline void SdotU8Vector(const uint8_t* v, const int8x16_t* a, int32x4_t (*acc)[4]) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  int8x16_t w[4];
  for (int j = 0; j < 4; ++j) w[j] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(v + 16 * j), flip));
  SdotVector<kLane, kT>(w, a, acc);
}

// kT tokens per call; the code vectors are loaded (and unpacked) once for all of them. Two sets
// of accumulators (low / high nibbles, even / odd quads) keep independent SDOT chains in flight
// for one token; with several tokens the tokens themselves are the independent chains.
template <int kT>
struct SdotDots {
  static constexpr int kTokens = kT;
  static constexpr bool kBiasedU8 = true;
  static constexpr int kSets = kT == 1 ? 2 : 1;

  template <bool kU4>
  static void Dots(const uint8_t* block, int32_t group, const int8_t* const* aq,
                   int32x4_t (*iacc)[4]) {
    int32x4_t c0[kT][4], c1[kT][4];
    for (int t = 0; t < kT; ++t) {
      for (int j = 0; j < 4; ++j) c0[t][j] = c1[t][j] = vdupq_n_s32(0);
    }
    int32x4_t(*second)[4] = kSets == 2 ? c1 : c0;
    if constexpr (kU4) {
      const int32_t half = group / 8;  // vector i: quads i (low nibbles) and i + half (high)
      for (int32_t i = 0; i < half; i += 4) {
        int8x16_t alo[kT], ahi[kT];
        for (int t = 0; t < kT; ++t) {
          alo[t] = vld1q_s8(aq[t] + 4 * i);
          ahi[t] = vld1q_s8(aq[t] + 4 * (i + half));
        }
        const uint8_t* v = block + 64 * i;
        SdotU4Vector<0, kT>(v, alo, ahi, c0, second);
        SdotU4Vector<1, kT>(v + 64, alo, ahi, c0, second);
        SdotU4Vector<2, kT>(v + 128, alo, ahi, c0, second);
        SdotU4Vector<3, kT>(v + 192, alo, ahi, c0, second);
      }
    } else {
      const int32_t quads = group / 4;
      for (int32_t i = 0; i < quads; i += 4) {
        int8x16_t a[kT];
        for (int t = 0; t < kT; ++t) a[t] = vld1q_s8(aq[t] + 4 * i);
        const uint8_t* v = block + 64 * i;
        SdotU8Vector<0, kT>(v, a, c0);
        SdotU8Vector<1, kT>(v + 64, a, second);
        SdotU8Vector<2, kT>(v + 128, a, c0);
        SdotU8Vector<3, kT>(v + 192, a, second);
      }
    }
    for (int t = 0; t < kT; ++t) {
      for (int j = 0; j < 4; ++j)
        iacc[t][j] = kSets == 2 ? vaddq_s32(c0[t][j], c1[t][j]) : c0[t][j];
    }
  }
};

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  PackedGemmFor<SdotDots<4>, SdotDots<1>>(w, a, panel_begin, panel_end, out);
}

double Int8Peak(double seconds) {
  // Twelve independent SDOT chains (16 multiply-adds each) in named registers, operands opaque to
  // the compiler so nothing folds.
  int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
  __asm__ volatile("" : "+w"(a), "+w"(b));
  int32x4_t c0 = vreinterpretq_s32_s8(a), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
            c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  uint64_t macs = 0;
  const int64_t start = NowNanos();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 14; ++it) {
      c0 = vdotq_s32(c0, a, b);
      c1 = vdotq_s32(c1, a, b);
      c2 = vdotq_s32(c2, a, b);
      c3 = vdotq_s32(c3, a, b);
      c4 = vdotq_s32(c4, a, b);
      c5 = vdotq_s32(c5, a, b);
      c6 = vdotq_s32(c6, a, b);
      c7 = vdotq_s32(c7, a, b);
      c8 = vdotq_s32(c8, a, b);
      c9 = vdotq_s32(c9, a, b);
      c10 = vdotq_s32(c10, a, b);
      c11 = vdotq_s32(c11, a, b);
      __asm__ volatile(""
                       : "+w"(c0), "+w"(c1), "+w"(c2), "+w"(c3), "+w"(c4), "+w"(c5), "+w"(c6),
                         "+w"(c7), "+w"(c8), "+w"(c9), "+w"(c10), "+w"(c11));
    }
    macs += uint64_t{12} * 16 * (1u << 14);
    elapsed = static_cast<double>(NowNanos() - start) * 1e-9;
  }
  return static_cast<double>(macs) / elapsed;
}

#include "kernels/lora_expand.inc"

}  // namespace
}  // namespace arm

const KernelTable& DotprodKernels() {
  static const KernelTable kTable = {
      .name = "dotprod",
      .quantize_rows = arm::neon::QuantizeRows,
      .packed_gemm = arm::PackedGemm,
      .prefill_gemm = nullptr,
      .dense_gemm = arm::neon::DenseGemm,
      .lora_expand = arm::LoraExpandImpl,
      .rmsnorm = arm::neon::Rmsnorm,
      .rope = arm::neon::Rope,
      .silu_mul = arm::neon::SiluMul,
      .kv_store = arm::neon::KvStore,
      .attention = arm::neon::Attention,
      .stream_read = arm::neon::StreamRead,
      .stream_read_prefetched = arm::neon::StreamReadPrefetched,
      .int8_peak = arm::Int8Peak,
  };
  return kTable;
}

}  // namespace pocket
