// ARMv8.6 int8 matrix-multiply kernels (USMMLA, USDOT): the packed matmul and the int8 ceiling;
// every float kernel is the baseline NEON table's. Compiled with -march=armv8.6-a+i8mm and only
// called when the CPU has it. Bit-identical to the reference.
//
// Both instructions take unsigned codes times signed activations, so u4 and u8 codes go in as
// they are (no bias correction).
//  - Several tokens (prefill): USMMLA multiplies a 2x8 block of codes (two weight rows, 8 columns)
//    by a 2x8 block of activations (two tokens), giving the 2x2 int32 products. Two adjacent
//    code vectors i, i + 1 (quads i, i + 1) interleaved by 32-bit words (ZIP1 / ZIP2) are exactly
//    those 2x8 blocks for row pairs (4j, 4j+1) and (4j+2, 4j+3); eight bytes of each of two
//    tokens' activations make the other operand. 16 rows x 4 tokens = 16 accumulators per group.
//  - One token (decode): USDOT by lane, as the dotprod table's SDOT.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/arm/neon_common.h"
#include "kernels/kernel_table.h"
#include "kernels/tables.h"

namespace pocket {
namespace arm {
namespace {

// Register j of code vectors v0, v1 (quads i, i + 1) as 2x8 USMMLA operands: rows (4j, 4j+1) in
// z[0], rows (4j+2, 4j+3) in z[1], each row's 8 codes being columns 4i..4i+7.
inline void RowPairs(const uint8_t* v0, const uint8_t* v1, int j, uint8x16_t* z) {
  const uint32x4_t w0 = vreinterpretq_u32_u8(vld1q_u8(v0 + 16 * j));
  const uint32x4_t w1 = vreinterpretq_u32_u8(vld1q_u8(v1 + 16 * j));
  z[0] = vreinterpretq_u8_u32(vzip1q_u32(w0, w1));
  z[1] = vreinterpretq_u8_u32(vzip2q_u32(w0, w1));
}

// Activations of tokens (2p, 2p + 1), 8 columns from column c: the 2x8 token operand.
inline int8x16_t TokenPair(const int8_t* const* aq, int p, int32_t c) {
  return vcombine_s8(vld1_s8(aq[2 * p] + c), vld1_s8(aq[2 * p + 1] + c));
}

// Row pair z (2x8) times both token pairs a[0], a[1] (2x8 each).
inline void Mmla(int32x4_t* acc, uint8x16_t z, const int8x16_t* a) {
  acc[0] = vusmmlaq_s32(acc[0], z, a[0]);
  acc[1] = vusmmlaq_s32(acc[1], z, a[1]);
}

// Four tokens per call. acc[r][p] = [(row 2r, token 2p), (2r, 2p+1), (2r+1, 2p), (2r+1, 2p+1)].
struct MmlaDots {
  static constexpr int kTokens = 4;
  static constexpr bool kBiasedU8 = false;

  template <bool kU4>
  static void Dots(const uint8_t* block, int32_t group, const int8_t* const* aq,
                   int32x4_t (*iacc)[4]) {
    int32x4_t acc[8][2];
    for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = vdupq_n_s32(0);
    if constexpr (kU4) {
      const uint8x16_t nib = vdupq_n_u8(0x0f);
      const int32_t half = group / 8;  // vector i: quads i (low nibbles) and i + half (high)
      for (int32_t i = 0; i < half; i += 2) {
        const int8x16_t alo[2] = {TokenPair(aq, 0, 4 * i), TokenPair(aq, 1, 4 * i)};
        const int8x16_t ahi[2] = {TokenPair(aq, 0, 4 * (i + half)),
                                  TokenPair(aq, 1, 4 * (i + half))};
        for (int j = 0; j < 4; ++j) {
          uint8x16_t z[2];
          RowPairs(block + 64 * i, block + 64 * (i + 1), j, z);
          for (int h = 0; h < 2; ++h) {
            Mmla(acc[2 * j + h], vandq_u8(z[h], nib), alo);
            Mmla(acc[2 * j + h], vshrq_n_u8(z[h], 4), ahi);
          }
        }
      }
    } else {
      const int32_t quads = group / 4;
      for (int32_t i = 0; i < quads; i += 2) {
        const int8x16_t a[2] = {TokenPair(aq, 0, 4 * i), TokenPair(aq, 1, 4 * i)};
        for (int j = 0; j < 4; ++j) {
          uint8x16_t z[2];
          RowPairs(block + 64 * i, block + 64 * (i + 1), j, z);
          Mmla(acc[2 * j], z[0], a);
          Mmla(acc[2 * j + 1], z[1], a);
        }
      }
    }
    // Rows 4j..4j+3 of token 2p: lanes 0 and 2 of acc[2j][p], acc[2j+1][p]; token 2p+1: 1 and 3.
    for (int j = 0; j < 4; ++j) {
      for (int p = 0; p < 2; ++p) {
        iacc[2 * p][j] = vuzp1q_s32(acc[2 * j][p], acc[2 * j + 1][p]);
        iacc[2 * p + 1][j] = vuzp2q_s32(acc[2 * j][p], acc[2 * j + 1][p]);
      }
    }
  }
};

// One token: USDOT by lane (unsigned code quads of 4 rows times one signed activation quad), two
// sets of accumulators for independent chains.
template <int kLane>
inline void UsdotVector(const uint8x16_t* w, int8x16_t a, int32x4_t* acc) {
  for (int j = 0; j < 4; ++j) acc[j] = vusdotq_laneq_s32(acc[j], w[j], a, kLane);
}

template <int kLane>
inline void UsdotU4Vector(const uint8_t* v, int8x16_t alo, int8x16_t ahi, int32x4_t* lo,
                          int32x4_t* hi) {
  const uint8x16_t nib = vdupq_n_u8(0x0f);
  uint8x16_t wl[4], wh[4];
  for (int j = 0; j < 4; ++j) {
    const uint8x16_t w = vld1q_u8(v + 16 * j);
    wl[j] = vandq_u8(w, nib);
    wh[j] = vshrq_n_u8(w, 4);
  }
  UsdotVector<kLane>(wl, alo, lo);
  UsdotVector<kLane>(wh, ahi, hi);
}

template <int kLane>
inline void UsdotU8Vector(const uint8_t* v, int8x16_t a, int32x4_t* acc) {
  uint8x16_t w[4];
  for (int j = 0; j < 4; ++j) w[j] = vld1q_u8(v + 16 * j);
  UsdotVector<kLane>(w, a, acc);
}

struct UsdotDots {
  static constexpr int kTokens = 1;
  static constexpr bool kBiasedU8 = false;

  template <bool kU4>
  static void Dots(const uint8_t* block, int32_t group, const int8_t* const* aq,
                   int32x4_t (*iacc)[4]) {
    int32x4_t c0[4], c1[4];
    for (int j = 0; j < 4; ++j) c0[j] = c1[j] = vdupq_n_s32(0);
    const int8_t* q = aq[0];
    if constexpr (kU4) {
      const int32_t half = group / 8;
      for (int32_t i = 0; i < half; i += 4) {
        const int8x16_t alo = vld1q_s8(q + 4 * i), ahi = vld1q_s8(q + 4 * (i + half));
        const uint8_t* v = block + 64 * i;
        UsdotU4Vector<0>(v, alo, ahi, c0, c1);
        UsdotU4Vector<1>(v + 64, alo, ahi, c0, c1);
        UsdotU4Vector<2>(v + 128, alo, ahi, c0, c1);
        UsdotU4Vector<3>(v + 192, alo, ahi, c0, c1);
      }
    } else {
      const int32_t quads = group / 4;
      for (int32_t i = 0; i < quads; i += 4) {
        const int8x16_t a = vld1q_s8(q + 4 * i);
        const uint8_t* v = block + 64 * i;
        UsdotU8Vector<0>(v, a, c0);
        UsdotU8Vector<1>(v + 64, a, c1);
        UsdotU8Vector<2>(v + 128, a, c0);
        UsdotU8Vector<3>(v + 192, a, c1);
      }
    }
    for (int j = 0; j < 4; ++j) iacc[0][j] = vaddq_s32(c0[j], c1[j]);
  }
};

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  PackedGemmFor<MmlaDots, UsdotDots>(w, a, panel_begin, panel_end, out);
}

double Int8Peak(double seconds) {
  // Twelve independent USMMLA chains (a 2x8 by 8x2 int8 product: 32 multiply-adds each) in
  // named registers, operands opaque to the compiler so nothing folds.
  uint8x16_t a = vdupq_n_u8(3);
  int8x16_t b = vdupq_n_s8(-2);
  __asm__ volatile("" : "+w"(a), "+w"(b));
  int32x4_t c0 = vreinterpretq_s32_u8(a), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
            c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  uint64_t macs = 0;
  const int64_t start = NowNanos();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 14; ++it) {
      c0 = vusmmlaq_s32(c0, a, b);
      c1 = vusmmlaq_s32(c1, a, b);
      c2 = vusmmlaq_s32(c2, a, b);
      c3 = vusmmlaq_s32(c3, a, b);
      c4 = vusmmlaq_s32(c4, a, b);
      c5 = vusmmlaq_s32(c5, a, b);
      c6 = vusmmlaq_s32(c6, a, b);
      c7 = vusmmlaq_s32(c7, a, b);
      c8 = vusmmlaq_s32(c8, a, b);
      c9 = vusmmlaq_s32(c9, a, b);
      c10 = vusmmlaq_s32(c10, a, b);
      c11 = vusmmlaq_s32(c11, a, b);
      __asm__ volatile(""
                       : "+w"(c0), "+w"(c1), "+w"(c2), "+w"(c3), "+w"(c4), "+w"(c5), "+w"(c6),
                         "+w"(c7), "+w"(c8), "+w"(c9), "+w"(c10), "+w"(c11));
    }
    macs += uint64_t{12} * 32 * (1u << 14);
    elapsed = static_cast<double>(NowNanos() - start) * 1e-9;
  }
  return static_cast<double>(macs) / elapsed;
}

#include "kernels/lora_expand.inc"

}  // namespace
}  // namespace arm

const KernelTable& I8mmKernels() {
  static const KernelTable kTable = {
      .name = "i8mm",
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
