// Baseline ARMv8 Advanced SIMD (NEON) kernels: every ARM64 CPU has them. Bit-identical to the
// reference for quantize_rows, packed_gemm (store / accumulate), dense_gemm, rmsnorm, rope and
// kv_store: the same operations in the same order (reference/canonical.h). The packed matmul's
// int8 products come from SMULL/SMLAL into int16 lanes (u4 codes: up to 16 products, the decode
// step's SmlalDecode; u8: two), widened into int32 by SADALP / SADDLP. The float kernels here are
// reused by the dotprod and i8mm tables, whose instructions only change the integer matmul.
#include <arm_neon.h>

#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/arm/neon_common.h"
#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/tables.h"
#include "quant/quantize.h"

namespace pocket {
namespace arm {
namespace {

// ---- packed integer matmul with SMULL / SMLAL / SADALP -----------------------------------------
//
// Register j of a 64-byte code vector holds rows 4j..4j+3, 4 codes each. SMULL(2) multiplies the
// low (high) 8 bytes, rows 4j, 4j+1 (4j+2, 4j+3), with a broadcast activation quad; SADALP adds
// adjacent int16 products into int32 lanes holding half a row each: lo[j] = [row 4j (k0 + k1),
// row 4j (k2 + k3), row 4j+1 ..., ...], hi[j] the same for rows 4j+2, 4j+3. A final ADDP makes
// the 4 row sums. u4 codes (0..15) are already valid int8; u8 codes are flipped to code - 128
// (K::kBiasedU8) so |product| <= 128 * 127 and two fit an int16 lane.
template <int kT>
struct SmlalDots {
  static constexpr int kTokens = kT;
  static constexpr bool kBiasedU8 = true;

  template <bool kU4>
  static void Dots(const uint8_t* block, int32_t group, const int8_t* const* aq,
                   int32x4_t (*iacc)[4]) {
    int32x4_t lo[kT][4], hi[kT][4];
    for (int t = 0; t < kT; ++t) {
      for (int j = 0; j < 4; ++j) {
        lo[t][j] = vdupq_n_s32(0);
        hi[t][j] = vdupq_n_s32(0);
      }
    }
    if constexpr (kU4) {
      // Vectors i, i + 1: quads i, i + 1 in the low nibbles, i + half, i + half + 1 in the high
      // ones; four products (|.| <= 15 * 127) per int16 lane.
      const uint8x16_t nib = vdupq_n_u8(0x0f);
      const int32_t half = group / 8;
      for (int32_t i = 0; i < half; i += 2) {
        int8x16_t a0[kT], a1[kT], a2[kT], a3[kT];
        for (int t = 0; t < kT; ++t) {
          a0[t] = BroadcastQuad(aq[t] + 4 * i);
          a1[t] = BroadcastQuad(aq[t] + 4 * i + 4);
          a2[t] = BroadcastQuad(aq[t] + 4 * (i + half));
          a3[t] = BroadcastQuad(aq[t] + 4 * (i + half) + 4);
        }
        for (int j = 0; j < 4; ++j) {
          const uint8x16_t w0 = vld1q_u8(block + 64 * i + 16 * j);
          const uint8x16_t w1 = vld1q_u8(block + 64 * (i + 1) + 16 * j);
          const int8x16_t l0 = vreinterpretq_s8_u8(vandq_u8(w0, nib));
          const int8x16_t l1 = vreinterpretq_s8_u8(vandq_u8(w1, nib));
          const int8x16_t h0 = vreinterpretq_s8_u8(vshrq_n_u8(w0, 4));
          const int8x16_t h1 = vreinterpretq_s8_u8(vshrq_n_u8(w1, 4));
          for (int t = 0; t < kT; ++t) {
            int16x8_t p = vmull_s8(vget_low_s8(l0), vget_low_s8(a0[t]));
            p = vmlal_s8(p, vget_low_s8(l1), vget_low_s8(a1[t]));
            p = vmlal_s8(p, vget_low_s8(h0), vget_low_s8(a2[t]));
            p = vmlal_s8(p, vget_low_s8(h1), vget_low_s8(a3[t]));
            lo[t][j] = vpadalq_s16(lo[t][j], p);
            int16x8_t q = vmull_high_s8(l0, a0[t]);
            q = vmlal_high_s8(q, l1, a1[t]);
            q = vmlal_high_s8(q, h0, a2[t]);
            q = vmlal_high_s8(q, h1, a3[t]);
            hi[t][j] = vpadalq_s16(hi[t][j], q);
          }
        }
      }
    } else {
      const uint8x16_t flip = vdupq_n_u8(0x80);
      const int32_t quads = group / 4;
      for (int32_t i = 0; i < quads; i += 2) {
        int8x16_t a0[kT], a1[kT];
        for (int t = 0; t < kT; ++t) {
          a0[t] = BroadcastQuad(aq[t] + 4 * i);
          a1[t] = BroadcastQuad(aq[t] + 4 * i + 4);
        }
        for (int j = 0; j < 4; ++j) {
          const int8x16_t w0 =
              vreinterpretq_s8_u8(veorq_u8(vld1q_u8(block + 64 * i + 16 * j), flip));
          const int8x16_t w1 =
              vreinterpretq_s8_u8(veorq_u8(vld1q_u8(block + 64 * (i + 1) + 16 * j), flip));
          for (int t = 0; t < kT; ++t) {
            int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(a0[t]));
            p = vmlal_s8(p, vget_low_s8(w1), vget_low_s8(a1[t]));
            lo[t][j] = vpadalq_s16(lo[t][j], p);
            int16x8_t q = vmull_high_s8(w0, a0[t]);
            q = vmlal_high_s8(q, w1, a1[t]);
            hi[t][j] = vpadalq_s16(hi[t][j], q);
          }
        }
      }
    }
    for (int t = 0; t < kT; ++t)
      for (int j = 0; j < 4; ++j) iacc[t][j] = vpaddq_s32(lo[t][j], hi[t][j]);
  }
};

// The decode step (one token) in the AVX2 decode loop's form: each 64-byte code vector loaded
// once (one 4-register load) and unpacked once, the two activation quads broadcast by LD1R, and
// 8 int16 chains taking 16 SMLALs each before one widening per block of 8 vectors. u4 codes are
// 0..15, so |code * a| <= 15 * 127 = 1905 and 16 products (8 vectors, low and high nibbles) add
// up to at most 30480 in an int16 lane; the integer sums are exact, hence the same as
// SmlalDots<1>'s in any order. docs/notes/neon-decode-analysis.md counts both loops. u8 codes
// take SmlalDots<1>.
struct SmlalDecode {
  static constexpr int kTokens = 1;
  static constexpr bool kBiasedU8 = true;

  template <bool kU4>
  static void Dots(const uint8_t* block, int32_t group, const int8_t* const* aq,
                   int32x4_t (*iacc)[4]) {
    if constexpr (!kU4) {
      SmlalDots<1>::Dots<false>(block, group, aq, iacc);
    } else {
      const uint8x16_t nib = vdupq_n_u8(0x0f);
      const int32_t half = group / 8;  // vector i: quad i (low nibbles), quad i + half (high)
      const uint8_t* c = block;
      const int8_t* al = aq[0];
      const int8_t* ah = aq[0] + 4 * half;
      int32x4_t sum[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
      for (int32_t v0 = 0; v0 < half; v0 += 8) {
        int16x8_t p[4], q[4];  // rows 4j, 4j + 1 | rows 4j + 2, 4j + 3
        for (int j = 0; j < 4; ++j) p[j] = q[j] = vdupq_n_s16(0);
        const int32_t v1 = v0 + 8 < half ? v0 + 8 : half;
        for (int32_t i = v0; i < v1; ++i, c += 64, al += 4, ah += 4) {
          // Kept as pointers: LD1R has no register-offset form, and GCC would index them.
          __asm__("" : "+r"(al), "+r"(ah));
          const int8x16_t alo =
              vreinterpretq_s8_u32(vld1q_dup_u32(reinterpret_cast<const uint32_t*>(al)));
          const int8x16_t ahi =
              vreinterpretq_s8_u32(vld1q_dup_u32(reinterpret_cast<const uint32_t*>(ah)));
          const uint8x16x4_t w = vld1q_u8_x4(c);
          for (int j = 0; j < 4; ++j) {
            const int8x16_t l = vreinterpretq_s8_u8(vandq_u8(w.val[j], nib));
            const int8x16_t h = vreinterpretq_s8_u8(vshrq_n_u8(w.val[j], 4));
            p[j] = vmlal_s8(p[j], vget_low_s8(l), vget_low_s8(alo));
            q[j] = vmlal_high_s8(q[j], l, alo);
            p[j] = vmlal_s8(p[j], vget_low_s8(h), vget_low_s8(ahi));
            q[j] = vmlal_high_s8(q[j], h, ahi);
          }
        }
        for (int j = 0; j < 4; ++j)
          sum[j] = vaddq_s32(sum[j], vpaddq_s32(vpaddlq_s16(p[j]), vpaddlq_s16(q[j])));
      }
      for (int j = 0; j < 4; ++j) iacc[0][j] = sum[j];
    }
  }
};

// ---- dense float matmul -----------------------------------------------------------------------

// Row r as floats: f32 in place, f16 / bf16 converted 4 at a time (exact), block types via the
// reference dequantizer.
const float* RowAsFloat(const WeightMatrix& w, int64_t r, float* scratch) {
  const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
  switch (w.type) {
    case DType::kF32:
      return reinterpret_cast<const float*>(src);
    case DType::kF16: {
      int64_t i = 0;
      for (; i + 4 <= w.cols; i += 4) vst1q_f32(scratch + i, LoadF16(h + i));
      if (i < w.cols) DequantizeRow(DType::kF16, h + i, scratch + i, w.cols - i);
      return scratch;
    }
    case DType::kBF16: {
      int64_t i = 0;
      for (; i + 4 <= w.cols; i += 4)
        vst1q_f32(scratch + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h + i), 16)));
      if (i < w.cols) DequantizeRow(DType::kBF16, h + i, scratch + i, w.cols - i);
      return scratch;
    }
    default:
      DequantizeRow(w.type, src, scratch, w.cols);
      return scratch;
  }
}

// The epilogue of one result v of token t at row r (kStore / kAccumulate), with out.add's term.
inline void StoreScalar(const GemmOut& out, int64_t t, int64_t r, float v) {
  if (out.add != nullptr) v += out.add[t * out.ld_add + r];
  float& y = out.y[t * out.ld + r];
  y = out.epilogue == Epilogue::kAccumulate ? y + v : v;
}

}  // namespace

namespace neon {

// ---- activations --------------------------------------------------------------------------

void QuantizeRows(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                  const float* norm_weight, float eps, QuantizedRows* out) {
  const int32_t group = out->group;  // a multiple of 32
  const int64_t n_groups = cols / group;
  const bool norm = norm_weight != nullptr;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * ldx;
    float32x4_t inv_rms = vdupq_n_f32(1.0f);
    if (norm) {
      const float mean = CanonicalDot(row, row, cols) / static_cast<float>(cols);
      inv_rms = vdupq_n_f32(1.0f / sqrtf(mean + eps));
    }
    int8_t* q_row = out->q + t * cols;
    for (int64_t g = 0; g < n_groups; ++g) {
      const float* src = row + g * group;
      const float* wg = norm ? norm_weight + g * group : nullptr;
      // x * inv_rms * weight, two rounded multiplies as the reference.
      auto load = [&](int32_t i) {
        const float32x4_t v = vld1q_f32(src + i);
        return norm ? vmulq_f32(vmulq_f32(v, inv_rms), vld1q_f32(wg + i)) : v;
      };
      float32x4_t vmax = vdupq_n_f32(0.0f);
      for (int32_t i = 0; i < group; i += 4) vmax = vmaxq_f32(vmax, vabsq_f32(load(i)));
      const float amax = vmaxvq_f32(vmax);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      out->scale[t * n_groups + g] = amax / 127.0f;
      const float32x4_t vinv = vdupq_n_f32(inv);
      const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127);
      int32x4_t vsum = vdupq_n_s32(0);
      for (int32_t i = 0; i < group; i += 16) {
        int32x4_t qi[4];
        for (int c = 0; c < 4; ++c) {
          // FCVTNS: round half to even, as the reference's nearbyint.
          qi[c] = vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_f32(load(i + 4 * c), vinv)), lo), hi);
          vsum = vaddq_s32(vsum, qi[c]);
        }
        const int16x8_t q01 = vcombine_s16(vmovn_s32(qi[0]), vmovn_s32(qi[1]));
        const int16x8_t q23 = vcombine_s16(vmovn_s32(qi[2]), vmovn_s32(qi[3]));
        vst1q_s8(q_row + g * group + i, vcombine_s8(vmovn_s16(q01), vmovn_s16(q23)));
      }
      out->sum[t * n_groups + g] = static_cast<float>(vaddvq_s32(vsum));
    }
  }
}

// ---- packed integer matmul
// -----------------------------------------------------------------------

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  PackedGemmFor<SmlalDots<2>, SmlalDecode>(w, a, panel_begin, panel_end, out);
}

// ---- dense float matmul -----------------------------------------------------------------------

void DenseGemm(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
               int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = RowAsFloat(w, r, scratch);
    int64_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) {
      const float* xs[4] = {x + t * ldx, x + (t + 1) * ldx, x + (t + 2) * ldx, x + (t + 3) * ldx};
      float v[4];
      CanonicalDots<4>(row, xs, w.cols, v);
      for (int j = 0; j < 4; ++j) StoreScalar(out, t + j, r, v[j]);
    }
    for (; t < n_tokens; ++t) StoreScalar(out, t, r, CanonicalDot(row, x + t * ldx, w.cols));
  }
}

// ---- small operations -------------------------------------------------------------------------

void Rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const float mean = CanonicalDot(x, x, n) / static_cast<float>(n);
  const float inv = 1.0f / sqrtf(mean + eps);
  const float32x4_t vinv = vdupq_n_f32(inv);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(y + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), vinv), vld1q_f32(weight + i)));
  for (; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
          bool interleaved) {
  const int64_t half = head_dim / 2;
  if (half % 4 != 0) {
    reference::Rope(x, n_heads, head_dim, cos, sin, interleaved);
    return;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; i += 4) {
      const float32x4_t c = vld1q_f32(cos + i), s = vld1q_f32(sin + i);
      // Separate multiplies and subtraction, as the reference (no fused multiply-add here).
      if (interleaved) {  // pairs (x[2i], x[2i + 1]): de-interleaved by LD2, re-interleaved by ST2
        float32x4x2_t p = vld2q_f32(v + 2 * i);
        const float32x4_t x0 = p.val[0], x1 = p.val[1];
        p.val[0] = vsubq_f32(vmulq_f32(x0, c), vmulq_f32(x1, s));
        p.val[1] = vaddq_f32(vmulq_f32(x1, c), vmulq_f32(x0, s));
        vst2q_f32(v + 2 * i, p);
      } else {
        const float32x4_t x0 = vld1q_f32(v + i), x1 = vld1q_f32(v + half + i);
        vst1q_f32(v + i, vsubq_f32(vmulq_f32(x0, c), vmulq_f32(x1, s)));
        vst1q_f32(v + half + i, vaddq_f32(vmulq_f32(x1, c), vmulq_f32(x0, s)));
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(out + i, vmulq_f32(Silu(vld1q_f32(gate + i)), vld1q_f32(up + i)));
  if (i < n) {
    float tmp[4];
    vst1q_f32(tmp, vmulq_f32(Silu(LoadPartial(gate + i, n - i)), LoadPartial(up + i, n - i)));
    for (int64_t j = 0; i + j < n; ++j) out[i + j] = tmp[j];
  }
}

// ---- machine ceilings ---------------------------------------------------------------------------

uint64_t StreamRead(const uint8_t* data, size_t n_bytes) {
  uint8x16_t a0 = vdupq_n_u8(0), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n_bytes; i += 64) {
    const uint8x16x4_t v = vld1q_u8_x4(data + i);  // one LD1 of four registers
    a0 = veorq_u8(a0, v.val[0]);
    a1 = veorq_u8(a1, v.val[1]);
    a2 = veorq_u8(a2, v.val[2]);
    a3 = veorq_u8(a3, v.val[3]);
  }
  const uint64x2_t x = vreinterpretq_u64_u8(veorq_u8(veorq_u8(a0, a1), veorq_u8(a2, a3)));
  return vgetq_lane_u64(x, 0) ^ vgetq_lane_u64(x, 1);
}

// Two halves at once, each with a prefetch 2 KB ahead (PRFM never faults, past the end too). The
// NEON decode kernels do not prefetch yet: this is the pattern to compare them with.
uint64_t StreamReadPrefetched(const uint8_t* data, size_t n_bytes) {
  constexpr size_t kAhead = 2048;
  const size_t half = n_bytes / 128 * 64;  // bytes of each stream, a multiple of 64
  const uint8_t* second = data + half;
  uint8x16_t a0 = vdupq_n_u8(0), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < half; i += 64) {
    __builtin_prefetch(data + i + kAhead);
    __builtin_prefetch(second + i + kAhead);
    const uint8x16x4_t v = vld1q_u8_x4(data + i);
    const uint8x16x4_t w = vld1q_u8_x4(second + i);
    a0 = veorq_u8(a0, veorq_u8(v.val[0], w.val[0]));
    a1 = veorq_u8(a1, veorq_u8(v.val[1], w.val[1]));
    a2 = veorq_u8(a2, veorq_u8(v.val[2], w.val[2]));
    a3 = veorq_u8(a3, veorq_u8(v.val[3], w.val[3]));
  }
  if (2 * half + 64 <= n_bytes) {  // the tail: one line
    const uint8x16x4_t v = vld1q_u8_x4(data + 2 * half);
    a0 = veorq_u8(a0, v.val[0]);
    a1 = veorq_u8(a1, v.val[1]);
    a2 = veorq_u8(a2, v.val[2]);
    a3 = veorq_u8(a3, v.val[3]);
  }
  const uint64x2_t x = vreinterpretq_u64_u8(veorq_u8(veorq_u8(a0, a1), veorq_u8(a2, a3)));
  return vgetq_lane_u64(x, 0) ^ vgetq_lane_u64(x, 1);
}

double Int8Peak(double seconds) {
  // Twelve independent SMLAL chains (8 int8 multiply-adds each, the packed matmul's instruction
  // here) in named registers, operands opaque to the compiler so nothing folds.
  int8x8_t a = vdup_n_s8(3), b = vdup_n_s8(-2);
  __asm__ volatile("" : "+w"(a), "+w"(b));
  int16x8_t c0 = vmovl_s8(a), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0,
            c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  uint64_t macs = 0;
  const int64_t start = NowNanos();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 14; ++it) {
      c0 = vmlal_s8(c0, a, b);
      c1 = vmlal_s8(c1, a, b);
      c2 = vmlal_s8(c2, a, b);
      c3 = vmlal_s8(c3, a, b);
      c4 = vmlal_s8(c4, a, b);
      c5 = vmlal_s8(c5, a, b);
      c6 = vmlal_s8(c6, a, b);
      c7 = vmlal_s8(c7, a, b);
      c8 = vmlal_s8(c8, a, b);
      c9 = vmlal_s8(c9, a, b);
      c10 = vmlal_s8(c10, a, b);
      c11 = vmlal_s8(c11, a, b);
      __asm__ volatile(""
                       : "+w"(c0), "+w"(c1), "+w"(c2), "+w"(c3), "+w"(c4), "+w"(c5), "+w"(c6),
                         "+w"(c7), "+w"(c8), "+w"(c9), "+w"(c10), "+w"(c11));
    }
    macs += uint64_t{12} * 8 * (1u << 14);
    elapsed = static_cast<double>(NowNanos() - start) * 1e-9;
  }
  return static_cast<double>(macs) / elapsed;
}

#include "kernels/lora_expand.inc"

}  // namespace neon
}  // namespace arm

const KernelTable& NeonKernels() {
  static const KernelTable kTable = {
      .name = "neon",
      .quantize_rows = arm::neon::QuantizeRows,
      .packed_gemm = arm::neon::PackedGemm,
      .prefill_gemm = nullptr,
      .dense_gemm = arm::neon::DenseGemm,
      .lora_expand = arm::neon::LoraExpandImpl,
      .rmsnorm = arm::neon::Rmsnorm,
      .rope = arm::neon::Rope,
      .silu_mul = arm::neon::SiluMul,
      .kv_store = arm::neon::KvStore,
      .attention = arm::neon::Attention,
      .stream_read = arm::neon::StreamRead,
      .stream_read_prefetched = arm::neon::StreamReadPrefetched,
      .int8_peak = arm::neon::Int8Peak,
  };
  return kTable;
}

}  // namespace pocket
