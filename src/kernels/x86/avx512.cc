// AVX-512 kernels (F, BW, VL, DQ, VNNI). Bit-identical to the reference for quantize_rows,
// packed_gemm (store / accumulate), dense_gemm, rmsnorm, rope and kv_store: the same operations
// in the same order (reference/canonical.h). This file is compiled with AVX-512 flags and only
// called when the CPU has them: it defines everything it uses itself (no shared inline code, whose
// AVX-512 copy the linker could pick for baseline callers).
#include <immintrin.h>

#include <math.h>  // sqrtf: std::sqrt would leave a weak AVX-512 copy in debug builds
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/tables.h"
#include "kernels/x86/avx512_common.h"
#include "quant/quantize.h"

namespace pocket {
namespace avx512 {

// ---- activations --------------------------------------------------------------------------

void QuantizeRows(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                  const float* norm_weight, float eps, QuantizedRows* out) {
  const int32_t group = out->group;
  const int64_t n_groups = cols / group;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * ldx;
    __m512 inv_rms = _mm512_set1_ps(1.0f);
    if (norm_weight != nullptr) {
      const float mean = SumOfSquares(row, cols) / static_cast<float>(cols);
      inv_rms = _mm512_set1_ps(1.0f / sqrtf(mean + eps));
    }
    int8_t* q_row = out->q + t * cols;
    for (int64_t g = 0; g < n_groups; ++g) {
      const float* src = row + g * group;
      // Pass 1: the group's absolute maximum (normalizing on the fly).
      __m512 vmax = _mm512_setzero_ps();
      for (int32_t i = 0; i < group; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        if (norm_weight != nullptr) {
          v = _mm512_mul_ps(_mm512_mul_ps(v, inv_rms),
                            _mm512_loadu_ps(norm_weight + g * group + i));
        }
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
      }
      const float amax = _mm512_reduce_max_ps(vmax);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      out->scale[t * n_groups + g] = amax / 127.0f;
      const __m512 vinv = _mm512_set1_ps(inv);
      const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
      __m512i vsum = _mm512_setzero_si512();
      for (int32_t i = 0; i < group; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        if (norm_weight != nullptr) {
          v = _mm512_mul_ps(_mm512_mul_ps(v, inv_rms),
                            _mm512_loadu_ps(norm_weight + g * group + i));
        }
        // Round half to even (the default MXCSR mode), as the reference's nearbyint.
        __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v, vinv));
        qi = _mm512_min_epi32(_mm512_max_epi32(qi, lo), hi);
        vsum = _mm512_add_epi32(vsum, qi);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q_row + g * group + i),
                         _mm512_cvtepi32_epi8(qi));
      }
      out->sum[t * n_groups + g] = static_cast<float>(_mm512_reduce_add_epi32(vsum));
    }
  }
}

// ---- packed integer matmul -------------------------------------------------------------------

// Float accumulators of one panel for one token, updated group by group:
// acc = fma(s, fma(m, S, d * (float)iacc), acc), as the reference.
inline __m512 AccumulateGroup(__m512 acc, __m512i iacc, __m512 d, __m512 m, float s, float sum) {
  const __m512 v =
      _mm512_fmadd_ps(m, _mm512_set1_ps(sum), _mm512_mul_ps(d, _mm512_cvtepi32_ps(iacc)));
  return _mm512_fmadd_ps(_mm512_set1_ps(s), v, acc);
}

inline __m512i Bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// acc += dot(u8 lanes of w, the 4 signed bytes at p broadcast), with the broadcast folded into
// the instruction's memory operand (compilers otherwise emit a separate broadcast for each).
inline __m512i DotBcast(__m512i acc, __m512i w, const int8_t* p) {
  __asm__("vpdpbusd %[a]%{1to16%}, %[w], %[acc]"
          : [acc] "+v"(acc)
          : [w] "v"(w), [a] "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// Integer dot products of one group of one panel with kTokens tokens' activations.
template <int kTokens>
inline void GroupDots(const uint8_t* block, bool u4, int32_t group, const int8_t* const* aq,
                      __m512i* iacc) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int t = 0; t < kTokens; ++t) iacc[t] = _mm512_setzero_si512();
  if (u4) {
    const int32_t half = group / 8;  // vectors per group; each holds quads i and i + half
    if constexpr (kTokens >= 6) {
      // Enough tokens to hide the dot product's latency with one chain each: the registers go
      // to more tokens per pass (integer sums: the order does not change the result).
      for (int32_t i = 0; i < half; ++i) {
        const __m512i v = _mm512_loadu_si512(block + 64 * i);
        const __m512i lo = _mm512_and_si512(v, nib);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        for (int t = 0; t < kTokens; ++t) iacc[t] = DotBcast(iacc[t], lo, aq[t] + 4 * i);
        for (int t = 0; t < kTokens; ++t) iacc[t] = DotBcast(iacc[t], hi, aq[t] + 4 * (i + half));
      }
    } else {
      // Two accumulator chains per token (low and high nibbles) hide the dot product's latency.
      __m512i iacc2[kTokens];
      for (int t = 0; t < kTokens; ++t) iacc2[t] = _mm512_setzero_si512();
      for (int32_t i = 0; i < half; ++i) {
        const __m512i v = _mm512_loadu_si512(block + 64 * i);
        const __m512i lo = _mm512_and_si512(v, nib);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        for (int t = 0; t < kTokens; ++t) iacc[t] = DotBcast(iacc[t], lo, aq[t] + 4 * i);
        for (int t = 0; t < kTokens; ++t) {
          iacc2[t] = DotBcast(iacc2[t], hi, aq[t] + 4 * (i + half));
        }
      }
      for (int t = 0; t < kTokens; ++t) iacc[t] = _mm512_add_epi32(iacc[t], iacc2[t]);
    }
  } else {
    const int32_t quads = group / 4;
    for (int32_t i = 0; i < quads; ++i) {
      const __m512i v = _mm512_loadu_si512(block + 64 * i);
      for (int t = 0; t < kTokens; ++t) iacc[t] = DotBcast(iacc[t], v, aq[t] + 4 * i);
    }
  }
}

// How far ahead the many-token path prefetches weights.
constexpr size_t kGemmPrefetchBytes = 4096;

struct PanelGeometry {
  bool u4;
  bool explicit_min;
  float neg_zero_point;  // symmetric layouts: m = neg_zero_point * d
  int32_t group;
  int64_t n_groups;
  size_t code_bytes;
  size_t group_bytes;
  size_t panel_bytes;
};

inline PanelGeometry Geometry(const PackedLayout& l) {
  PanelGeometry g;
  g.u4 = l.codes == PackedCodes::kU4;
  g.group = l.group;
  g.n_groups = l.cols / l.group;
  g.code_bytes = static_cast<size_t>(l.group) * 16 * (g.u4 ? 4 : 8) / 8;
  g.explicit_min = l.explicit_min;
  g.neg_zero_point = g.u4 ? -8.0f : -128.0f;
  g.group_bytes = g.code_bytes + (g.explicit_min ? 64 : 32);
  g.panel_bytes = g.group_bytes * static_cast<size_t>(g.n_groups);
  return g;
}

// Results of panel p for kTokens tokens starting at t0 (acc[t] = 16 rows).
template <int kTokens>
inline void PanelTokens(const PanelGeometry& geo, const uint8_t* panel, const QuantizedRows& a,
                        int64_t t0, __m512* acc) {
  const int8_t* aq[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    acc[t] = _mm512_setzero_ps();
    aq[t] = a.q + (t0 + t) * a.cols;
  }
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* block = panel + static_cast<size_t>(g) * geo.group_bytes;
    // The weights stream from memory on the chunk's first pass: prefetch ahead as the decode
    // path does (a verification pass of a few tokens is otherwise slower per byte than decode).
    for (size_t off = 0; off < geo.group_bytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(block + kGemmPrefetchBytes + off), _MM_HINT_T0);
    }
    __m512i iacc[kTokens];
    const int8_t* aqg[kTokens];
    for (int t = 0; t < kTokens; ++t) aqg[t] = aq[t] + g * geo.group;
    GroupDots<kTokens>(block, geo.u4, geo.group, aqg, iacc);
    const __m512 d = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + geo.code_bytes)));
    const __m512 m = geo.explicit_min
                         ? _mm512_cvtph_ps(_mm256_loadu_si256(
                               reinterpret_cast<const __m256i*>(block + geo.code_bytes + 32)))
                         : _mm512_mul_ps(_mm512_set1_ps(geo.neg_zero_point), d);
    for (int t = 0; t < kTokens; ++t) {
      const int64_t idx = (t0 + t) * geo.n_groups + g;
      acc[t] = AccumulateGroup(acc[t], iacc[t], d, m, a.scale[idx], a.sum[idx]);
    }
  }
}

template <int kTokens>
void PanelRange(const PackedMatrix& w, const PanelGeometry& geo, const QuantizedRows& a, int64_t t0,
                int64_t panel_begin, int64_t panel_end, const GemmOut& out) {
  const int64_t rows = w.layout.rows;
  if (out.epilogue == Epilogue::kSwiGlu) {
    for (int64_t p = panel_begin; p < panel_end; p += 2) {
      __m512 gate[kTokens], up[kTokens];
      PanelTokens<kTokens>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes, a, t0, gate);
      PanelTokens<kTokens>(geo, w.data + static_cast<size_t>(p + 1) * geo.panel_bytes, a, t0, up);
      for (int t = 0; t < kTokens; ++t)
        StoreSwiGlu(out, rows, t0 + t, (p / 2) * 16, gate[t], up[t]);
    }
    return;
  }
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    __m512 acc[kTokens];
    PanelTokens<kTokens>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes, a, t0, acc);
    for (int t = 0; t < kTokens; ++t) StorePanel(out, t0 + t, p * 16, rows, acc[t]);
  }
}

constexpr size_t kPrefetchBytes = 4096;
// Weight bytes of the panels a many-token matmul keeps in cache at once.
constexpr size_t kGemmChunkBytes = size_t{32} << 10;

// One token (the decode step), two panels at a time: four independent dot-product chains and two
// memory streams keep the loads in flight; the kernel runs at the speed of memory.
template <bool kU4>
inline void DecodeTwoPanels(const PanelGeometry& geo, const uint8_t* p0, const uint8_t* p1,
                            const QuantizedRows& a, int64_t t, __m512* out0, __m512* out1) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  const int8_t* aq = a.q + t * a.cols;
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* b0 = p0 + static_cast<size_t>(g) * geo.group_bytes;
    const uint8_t* b1 = p1 + static_cast<size_t>(g) * geo.group_bytes;
    // Software prefetch a few KB ahead on both streams (the hardware prefetcher alone leaves
    // bandwidth unused when it has to find two streams after every matrix switch), one line per
    // stream per code vector, spread through the dot products rather than a whole group's lines
    // in one burst (+2 to 4% decode, interleaved A/B runs). 4 KB ahead, and past its panel's end
    // each stream prefetches the same point of the next pair's panel, as the AVX2 kernel: on a
    // Zen 5 EPYC the 2 KB distance without the next pair left a third of the bandwidth unused
    // (1-thread decode 111-125 -> 162-177 tok/s, docs/benchmarks.md).
    const size_t group_off = static_cast<size_t>(g) * geo.group_bytes;
    const size_t ahead = group_off + kPrefetchBytes < geo.panel_bytes
                             ? kPrefetchBytes
                             : kPrefetchBytes + geo.panel_bytes;
    const char* pf0 = reinterpret_cast<const char*>(b0 + ahead);
    const char* pf1 = reinterpret_cast<const char*>(b1 + ahead);
    const int8_t* ag = aq + g * geo.group;
    __m512i i0a = _mm512_setzero_si512(), i0b = i0a, i1a = i0a, i1b = i0a;
    size_t prefetched = 0;  // bytes of this group's stretch prefetched so far
    if constexpr (kU4) {
      const int32_t half = geo.group / 8;
      for (int32_t i = 0; i < half; ++i) {
        _mm_prefetch(pf0 + 64 * i, _MM_HINT_T0);
        _mm_prefetch(pf1 + 64 * i, _MM_HINT_T0);
        const __m512i v0 = _mm512_loadu_si512(b0 + 64 * i), v1 = _mm512_loadu_si512(b1 + 64 * i);
        const __m512i alo = Bcast32(ag + 4 * i), ahi = Bcast32(ag + 4 * (i + half));
        i0a = _mm512_dpbusd_epi32(i0a, _mm512_and_si512(v0, nib), alo);
        i0b = _mm512_dpbusd_epi32(i0b, _mm512_and_si512(_mm512_srli_epi16(v0, 4), nib), ahi);
        i1a = _mm512_dpbusd_epi32(i1a, _mm512_and_si512(v1, nib), alo);
        i1b = _mm512_dpbusd_epi32(i1b, _mm512_and_si512(_mm512_srli_epi16(v1, 4), nib), ahi);
      }
      prefetched = static_cast<size_t>(half) * 64;
    } else {
      const int32_t quads = geo.group / 4;
      for (int32_t i = 0; i < quads; i += 2) {
        _mm_prefetch(pf0 + 64 * i, _MM_HINT_T0);
        _mm_prefetch(pf0 + 64 * i + 64, _MM_HINT_T0);
        _mm_prefetch(pf1 + 64 * i, _MM_HINT_T0);
        _mm_prefetch(pf1 + 64 * i + 64, _MM_HINT_T0);
        const __m512i a0 = Bcast32(ag + 4 * i), a1 = Bcast32(ag + 4 * i + 4);
        i0a = _mm512_dpbusd_epi32(i0a, _mm512_loadu_si512(b0 + 64 * i), a0);
        i0b = _mm512_dpbusd_epi32(i0b, _mm512_loadu_si512(b0 + 64 * i + 64), a1);
        i1a = _mm512_dpbusd_epi32(i1a, _mm512_loadu_si512(b1 + 64 * i), a0);
        i1b = _mm512_dpbusd_epi32(i1b, _mm512_loadu_si512(b1 + 64 * i + 64), a1);
      }
      prefetched = static_cast<size_t>(quads) * 64;
    }
    for (size_t off = prefetched; off < geo.group_bytes; off += 64) {  // the scale lines
      _mm_prefetch(pf0 + off, _MM_HINT_T0);
      _mm_prefetch(pf1 + off, _MM_HINT_T0);
    }
    const __m512 d0 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + geo.code_bytes)));
    const __m512 d1 =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + geo.code_bytes)));
    __m512 m0, m1;
    if (geo.explicit_min) {
      m0 = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + geo.code_bytes + 32)));
      m1 = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + geo.code_bytes + 32)));
    } else {
      m0 = _mm512_mul_ps(_mm512_set1_ps(geo.neg_zero_point), d0);
      m1 = _mm512_mul_ps(_mm512_set1_ps(geo.neg_zero_point), d1);
    }
    const int64_t idx = t * geo.n_groups + g;
    acc0 = AccumulateGroup(acc0, _mm512_add_epi32(i0a, i0b), d0, m0, a.scale[idx], a.sum[idx]);
    acc1 = AccumulateGroup(acc1, _mm512_add_epi32(i1a, i1b), d1, m1, a.scale[idx], a.sum[idx]);
  }
  *out0 = acc0;
  *out1 = acc1;
}

template <bool kU4>
void DecodePanels(const PackedMatrix& w, const PanelGeometry& geo, const QuantizedRows& a,
                  int64_t t, int64_t panel_begin, int64_t panel_end, const GemmOut& out) {
  const int64_t rows = w.layout.rows;
  int64_t p = panel_begin;
  for (; p + 2 <= panel_end; p += 2) {
    __m512 r0, r1;
    DecodeTwoPanels<kU4>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes,
                         w.data + static_cast<size_t>(p + 1) * geo.panel_bytes, a, t, &r0, &r1);
    if (out.epilogue == Epilogue::kSwiGlu) {  // (gate, up) pair
      StoreSwiGlu(out, rows, t, (p / 2) * 16, r0, r1);
    } else {
      StorePanel(out, t, p * 16, rows, r0);
      StorePanel(out, t, (p + 1) * 16, rows, r1);
    }
  }
  if (p < panel_end) PanelRange<1>(w, geo, a, t, p, panel_end, out);  // odd count (never SwiGLU)
}

// ---- many-token path: blocks of 16 tokens --------------------------------------------------

// Sixteen tokens' activations interleaved so that one cache line holds the same 4 columns of every
// token (q[quad][token][4]), with their scales and sums transposed to [group][token]: the dot
// products of a block then address every activation from one pointer with constant offsets, and
// one loaded weight vector serves 16 tokens (u4: 32 dot products, its low and high nibbles).
constexpr int kBlockTokens = 16;
constexpr int64_t kMaxBlockCols = 4096;  // larger matrices use the 8-token path
struct TokenBlock {
  alignas(64) int8_t q[kMaxBlockCols * kBlockTokens];
  alignas(64) float scale[kMaxBlockCols / 32 * kBlockTokens];
  alignas(64) float sum[kMaxBlockCols / 32 * kBlockTokens];
};

void InterleaveTokens(const QuantizedRows& a, int64_t t0, TokenBlock* blk) {
  const int64_t quads = a.cols / 4, n_groups = a.n_groups();
  const __m512i rows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(a.cols)));
  const int8_t* base = a.q + t0 * a.cols;
  for (int64_t q = 0; q < quads; ++q) {
    _mm512_store_si512(blk->q + q * 64, _mm512_i32gather_epi32(rows, base + 4 * q, 1));
  }
  const __m512i grows =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(n_groups)));
  for (int64_t g = 0; g < n_groups; ++g) {
    _mm512_store_ps(blk->scale + g * 16,
                    _mm512_i32gather_ps(grows, a.scale + t0 * n_groups + g, 4));
    _mm512_store_ps(blk->sum + g * 16, _mm512_i32gather_ps(grows, a.sum + t0 * n_groups + g, 4));
  }
}

// Results of one panel for the 16 tokens of `blk` (acc[t]: 16 rows, in memory: sixteen integer
// chains take the registers). Same operations per token as PanelTokens.
template <bool kU4>
inline void PanelBlock(const PanelGeometry& geo, const uint8_t* panel, const TokenBlock& blk,
                       __m512* acc) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int t = 0; t < kBlockTokens; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* block = panel + static_cast<size_t>(g) * geo.group_bytes;
    const int8_t* aq = blk.q + g * geo.group * kBlockTokens;
    __m512i iacc[kBlockTokens];
    for (int t = 0; t < kBlockTokens; ++t) iacc[t] = _mm512_setzero_si512();
    if constexpr (kU4) {
      const int32_t half = geo.group / 8;
      const int8_t* aq_hi = aq + half * 64;
      for (int32_t i = 0; i < half; ++i) {
        const __m512i v = _mm512_loadu_si512(block + 64 * i);
        const __m512i lo = _mm512_and_si512(v, nib);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        for (int t = 0; t < kBlockTokens; ++t) iacc[t] = DotBcast(iacc[t], lo, aq + 64 * i + 4 * t);
        for (int t = 0; t < kBlockTokens; ++t) {
          iacc[t] = DotBcast(iacc[t], hi, aq_hi + 64 * i + 4 * t);
        }
      }
    } else {
      const int32_t quads = geo.group / 4;
      for (int32_t i = 0; i < quads; ++i) {
        const __m512i v = _mm512_loadu_si512(block + 64 * i);
        for (int t = 0; t < kBlockTokens; ++t) iacc[t] = DotBcast(iacc[t], v, aq + 64 * i + 4 * t);
      }
    }
    const __m512 d = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + geo.code_bytes)));
    const __m512 m = geo.explicit_min
                         ? _mm512_cvtph_ps(_mm256_loadu_si256(
                               reinterpret_cast<const __m256i*>(block + geo.code_bytes + 32)))
                         : _mm512_mul_ps(_mm512_set1_ps(geo.neg_zero_point), d);
    const float* s = blk.scale + g * kBlockTokens;
    const float* sum = blk.sum + g * kBlockTokens;
    for (int t = 0; t < kBlockTokens; ++t) {
      acc[t] = AccumulateGroup(acc[t], iacc[t], d, m, s[t], sum[t]);
    }
  }
}

template <bool kU4>
void BlockRange(const PackedMatrix& w, const PanelGeometry& geo, const TokenBlock& blk, int64_t t0,
                int64_t panel_begin, int64_t panel_end, const GemmOut& out) {
  const int64_t rows = w.layout.rows;
  alignas(64) __m512 acc[kBlockTokens], up[kBlockTokens];
  if (out.epilogue == Epilogue::kSwiGlu) {
    for (int64_t p = panel_begin; p < panel_end; p += 2) {
      PanelBlock<kU4>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes, blk, acc);
      PanelBlock<kU4>(geo, w.data + static_cast<size_t>(p + 1) * geo.panel_bytes, blk, up);
      for (int t = 0; t < kBlockTokens; ++t)
        StoreSwiGlu(out, rows, t0 + t, (p / 2) * 16, acc[t], up[t]);
    }
    return;
  }
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    PanelBlock<kU4>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes, blk, acc);
    for (int t = 0; t < kBlockTokens; ++t) StorePanel(out, t0 + t, p * 16, rows, acc[t]);
  }
}

// Weight bytes of the panels the 16-token blocks pass over before moving on (kept in L2).
constexpr size_t kBlockChunkBytes = size_t{1} << 20;

// Tokens [0, n_blocked) (a multiple of 16) in blocks of 16, panels in chunks of about
// kBlockChunkBytes (an even count: SwiGLU pairs stay together). Not inlined: its 80 KB block stays
// off the stack of the decode and few-token calls.
__attribute__((noinline)) void BlockedTokens(const PackedMatrix& w, const PanelGeometry& geo,
                                             const QuantizedRows& a, int64_t n_blocked,
                                             int64_t panel_begin, int64_t panel_end,
                                             const GemmOut& out) {
  TokenBlock blk;
  const int64_t block_chunk =
      std::max<int64_t>(2, static_cast<int64_t>(kBlockChunkBytes / geo.panel_bytes) & ~int64_t{1});
  for (int64_t c0 = panel_begin; c0 < panel_end; c0 += block_chunk) {
    const int64_t c1 = std::min(panel_end, c0 + block_chunk);
    for (int64_t t = 0; t < n_blocked; t += kBlockTokens) {
      InterleaveTokens(a, t, &blk);
      if (geo.u4) {
        BlockRange<true>(w, geo, blk, t, c0, c1, out);
      } else {
        BlockRange<false>(w, geo, blk, t, c0, c1, out);
      }
    }
  }
}

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  const PanelGeometry geo = Geometry(w.layout);
  if (a.n_tokens == 1) {
    if (geo.u4) {
      DecodePanels<true>(w, geo, a, 0, panel_begin, panel_end, out);
    } else {
      DecodePanels<false>(w, geo, a, 0, panel_begin, panel_end, out);
    }
    return;
  }
  // Whole blocks of 16 tokens first (rows of at most kMaxBlockCols columns), then the rest.
  int64_t t_begin = 0;
  if (a.n_tokens >= kBlockTokens && a.cols <= kMaxBlockCols) {
    t_begin = a.n_tokens / kBlockTokens * kBlockTokens;
    BlockedTokens(w, geo, a, t_begin, panel_begin, panel_end, out);
    if (t_begin == a.n_tokens) return;
  }
  // Panels in chunks that stay in L1 while the remaining tokens pass over them (blocks of up to 8
  // tokens share each weight load). An even chunk keeps SwiGLU (gate, up) pairs together.
  const int64_t chunk =
      std::max<int64_t>(2, static_cast<int64_t>(kGemmChunkBytes / geo.panel_bytes) & ~int64_t{1});
  for (int64_t c0 = panel_begin; c0 < panel_end; c0 += chunk) {
    const int64_t c1 = std::min(panel_end, c0 + chunk);
    // Passes of at most 12 tokens, as even as possible (13 = 7 + 6, not 12 + 1: a pass of one or
    // two tokens has too few dot-product chains to hide their latency, and every pass unpacks
    // the weights again).
    for (int64_t t = t_begin; t < a.n_tokens;) {
      const int64_t left = a.n_tokens - t;
      const int64_t passes = (left + 11) / 12;
      const int64_t take = (left + passes - 1) / passes;
      switch (take) {
        case 12:
          PanelRange<12>(w, geo, a, t, c0, c1, out);
          break;
        case 11:
          PanelRange<11>(w, geo, a, t, c0, c1, out);
          break;
        case 10:
          PanelRange<10>(w, geo, a, t, c0, c1, out);
          break;
        case 9:
          PanelRange<9>(w, geo, a, t, c0, c1, out);
          break;
        case 8:
          PanelRange<8>(w, geo, a, t, c0, c1, out);
          break;
        case 7:
          PanelRange<7>(w, geo, a, t, c0, c1, out);
          break;
        case 6:
          PanelRange<6>(w, geo, a, t, c0, c1, out);
          break;
        case 5:
          PanelRange<5>(w, geo, a, t, c0, c1, out);
          break;
        case 4:
          PanelRange<4>(w, geo, a, t, c0, c1, out);
          break;
        case 3:
          PanelRange<3>(w, geo, a, t, c0, c1, out);
          break;
        case 2:
          PanelRange<2>(w, geo, a, t, c0, c1, out);
          break;
        default:
          PanelRange<1>(w, geo, a, t, c0, c1, out);
          break;
      }
      t += take;
    }
  }
}

// ---- dense float matmul -----------------------------------------------------------------------

// Row r as floats: f32 in place, f16 / bf16 converted 16 at a time, block types via the
// reference dequantizer (exact either way).
inline const float* RowAsFloat(const WeightMatrix& w, int64_t r, float* scratch) {
  const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
  switch (w.type) {
    case DType::kF32:
      return reinterpret_cast<const float*>(src);
    case DType::kF16:
      for (int64_t i = 0; i < w.cols; i += 16) {
        const __mmask16 m = MaskFor(w.cols - i);
        _mm512_mask_storeu_ps(scratch + i, m,
                              _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + 2 * i)));
      }
      return scratch;
    case DType::kBF16:
      for (int64_t i = 0; i < w.cols; i += 16) {
        const __mmask16 m = MaskFor(w.cols - i);
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + 2 * i));
        _mm512_mask_storeu_ps(scratch + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
      }
      return scratch;
    case DType::kQ8_0:
      // Blocks of 32: an f16 scale and 32 int8 codes; scale * code, as DequantizeRow (exact).
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* block = src + b * 34;
        uint16_t h;
        std::memcpy(&h, block, 2);
        const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
        for (int half = 0; half < 2; ++half) {
          const __m128i q =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + 16 * half));
          const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
          _mm512_storeu_ps(scratch + b * 32 + 16 * half, _mm512_mul_ps(d, v));
        }
      }
      return scratch;
    default:
      DequantizeRow(w.type, src, scratch, w.cols);
      return scratch;
  }
}

// Columns [i, i + 16) of row `src` (masked by m) as floats, converted in registers exactly as
// RowAsFloat does (the same values, so the same dots); for the types FusedRowType accepts.
inline bool FusedRowType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0;
}
inline __m512 FusedChunk(DType type, const uint8_t* src, int64_t i, __mmask16 m) {
  switch (type) {
    case DType::kF32:
      return _mm512_maskz_loadu_ps(m, src + 4 * i);
    case DType::kF16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + 2 * i));
    case DType::kBF16: {
      const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + 2 * i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    default: {  // Q8_0: whole blocks of 32, so no mask
      const uint8_t* block = src + (i / 32) * 34;
      uint16_t h;
      std::memcpy(&h, block, 2);
      const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + (i % 32)));
      return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
  }
}

// DenseGemmFewTokens for Q8_0 rows (a LoRA factor of an int8 adapter package): the same
// products in the same order (value = scale * code, then the lane's fused multiply-add, lane
// i % 16 in column order), with each block's scale converted once for its 32 columns and each
// row's next 64 bytes fetched once: for one token the loop is bound by its instruction count.
void DenseQ8FewTokens(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                      int64_t row_begin, int64_t row_end, const GemmOut& out) {
  const size_t rb = w.row_bytes;
  const int64_t n_blocks = w.cols / 32;
  auto chunk = [](const uint8_t* block, int half) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + 16 * half))));
  };
  auto scale = [](const uint8_t* block) {
    uint16_t h;
    std::memcpy(&h, block, 2);
    return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
  };
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * ldx;
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * rb;
      // The next four rows are fetched while these are multiplied (short rows: the hardware
      // prefetcher would not ramp up on them), a line per row every other block.
      const uint8_t* next = src + 4 * rb;
      const int n_next = static_cast<int>(std::min<int64_t>(4, row_end - r - 4));
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t b = 0; b < n_blocks; ++b) {
        if (b % 2 == 0) {
          for (int j = 0; j < n_next; ++j)
            _mm_prefetch(reinterpret_cast<const char*>(next + j * rb + b * 34), _MM_HINT_T0);
        }
        const uint8_t* k0 = src + b * 34;
        const uint8_t* k1 = k0 + rb;
        const uint8_t* k2 = k1 + rb;
        const uint8_t* k3 = k2 + rb;
        const __m512 d0 = scale(k0), d1 = scale(k1), d2 = scale(k2), d3 = scale(k3);
        for (int half = 0; half < 2; ++half) {
          const __m512 xv = _mm512_loadu_ps(xt + b * 32 + 16 * half);
          a0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, chunk(k0, half)), xv, a0);
          a1 = _mm512_fmadd_ps(_mm512_mul_ps(d1, chunk(k1, half)), xv, a1);
          a2 = _mm512_fmadd_ps(_mm512_mul_ps(d2, chunk(k2, half)), xv, a2);
          a3 = _mm512_fmadd_ps(_mm512_mul_ps(d3, chunk(k3, half)), xv, a3);
        }
      }
      StoreScalar(out, t, r, CanonicalReduce(a0));
      StoreScalar(out, t, r + 1, CanonicalReduce(a1));
      StoreScalar(out, t, r + 2, CanonicalReduce(a2));
      StoreScalar(out, t, r + 3, CanonicalReduce(a3));
    }
    for (; r < row_end; ++r) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * rb;
      __m512 a = _mm512_setzero_ps();
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* k = src + b * 34;
        const __m512 d = scale(k);
        for (int half = 0; half < 2; ++half) {
          a = _mm512_fmadd_ps(_mm512_mul_ps(d, chunk(k, half)),
                              _mm512_loadu_ps(xt + b * 32 + 16 * half), a);
        }
      }
      StoreScalar(out, t, r, CanonicalReduce(a));
    }
  }
}

// Fewer than 4 tokens (decode, the LoRA intermediates of one token): rows in fours, converted in
// registers, four independent accumulators (each row's dot is still lane i % 16 in column order).
void DenseGemmFewTokens(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                        int64_t row_begin, int64_t row_end, const GemmOut& out) {
  const size_t rb = w.row_bytes;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * ldx;
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * rb;
      // The next four rows are fetched while these are multiplied: the rows are short (a LoRA
      // factor's rank rows), too short for the hardware prefetcher to ramp up on its own.
      const uint8_t* next = src + 4 * rb;
      const int n_next = static_cast<int>(std::min<int64_t>(4, row_end - r - 4));
      const int64_t step = static_cast<int64_t>(rb) * 16 / w.cols + 1;  // bytes per 16 columns
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < w.cols; i += 16) {
        const __mmask16 m = MaskFor(w.cols - i);
        if (n_next > 0) {
          const int64_t at = i / 16 * step;
          for (int j = 0; j < n_next; ++j)
            _mm_prefetch(reinterpret_cast<const char*>(next + j * rb + at), _MM_HINT_T0);
        }
        const __m512 xv = _mm512_maskz_loadu_ps(m, xt + i);
        a0 = _mm512_fmadd_ps(FusedChunk(w.type, src, i, m), xv, a0);
        a1 = _mm512_fmadd_ps(FusedChunk(w.type, src + rb, i, m), xv, a1);
        a2 = _mm512_fmadd_ps(FusedChunk(w.type, src + 2 * rb, i, m), xv, a2);
        a3 = _mm512_fmadd_ps(FusedChunk(w.type, src + 3 * rb, i, m), xv, a3);
      }
      StoreScalar(out, t, r, CanonicalReduce(a0));
      StoreScalar(out, t, r + 1, CanonicalReduce(a1));
      StoreScalar(out, t, r + 2, CanonicalReduce(a2));
      StoreScalar(out, t, r + 3, CanonicalReduce(a3));
    }
    for (; r < row_end; ++r) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * rb;
      __m512 a = _mm512_setzero_ps();
      for (int64_t i = 0; i < w.cols; i += 16) {
        const __mmask16 m = MaskFor(w.cols - i);
        a = _mm512_fmadd_ps(FusedChunk(w.type, src, i, m), _mm512_maskz_loadu_ps(m, xt + i), a);
      }
      StoreScalar(out, t, r, CanonicalReduce(a));
    }
  }
}

// Four rows (as floats) times K tokens: 4 K accumulators, each the canonical dot of one row and
// one token (masked loads on the last columns, as CanonicalDot).
template <int K>
void DenseRowsTokens(const float* const* rows, const float* x, int64_t ldx, int64_t cols,
                     const GemmOut& out, int64_t t, int64_t r) {
  __m512 acc[4][K];
  for (int j = 0; j < 4; ++j) {
    for (int u = 0; u < K; ++u) acc[j][u] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < cols; i += 16) {
    const __mmask16 m = MaskFor(cols - i);
    __m512 xv[K];
    for (int u = 0; u < K; ++u) xv[u] = _mm512_maskz_loadu_ps(m, x + u * ldx + i);
    for (int j = 0; j < 4; ++j) {
      const __m512 wv = _mm512_maskz_loadu_ps(m, rows[j] + i);
      for (int u = 0; u < K; ++u) acc[j][u] = _mm512_fmadd_ps(wv, xv[u], acc[j][u]);
    }
  }
  for (int j = 0; j < 4; ++j) {
    for (int u = 0; u < K; ++u) StoreScalar(out, t + u, r + j, CanonicalReduce(acc[j][u]));
  }
}

void DenseGemm(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
               int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch) {
  if (n_tokens < 4 && w.type == DType::kQ8_0 && w.cols % 32 == 0) {
    DenseQ8FewTokens(w, x, ldx, n_tokens, row_begin, row_end, out);
    return;
  }
  if (n_tokens < 4 && FusedRowType(w.type)) {
    DenseGemmFewTokens(w, x, ldx, n_tokens, row_begin, row_end, out);
    return;
  }
  int64_t r = row_begin;
  if (FusedRowType(w.type)) {
    // Blocks of 4 rows (as floats in scratch: 4 * cols) x 4 tokens: 16 accumulators, each the
    // canonical dot of one row and one token.
    const int64_t ld = (w.cols + 15) / 16 * 16;
    for (; r + 4 <= row_end; r += 4) {
      // The next four rows are fetched while these are used for every token (short rows: the
      // hardware prefetcher would not ramp up on them).
      for (int64_t j = r + 4; j < std::min(row_end, r + 8); ++j) {
        const char* next =
            reinterpret_cast<const char*>(w.data + static_cast<size_t>(j) * w.row_bytes);
        for (size_t at = 0; at < w.row_bytes; at += 64) _mm_prefetch(next + at, _MM_HINT_T0);
      }
      const float* rows[4];
      for (int j = 0; j < 4; ++j) {
        const float* row = RowAsFloat(w, r + j, scratch + j * ld);
        rows[j] = row;
      }
      int64_t t = 0;
      if (w.cols % 16 == 0) {
        // Whole vectors: 4 rows x 6 tokens (24 accumulators, 10 loads per 24 multiply-adds; a
        // LoRA A step on 64 tokens 36 -> 65-85 GMAC/s here, LoraA/avx512/q8_0/64), each still the
        // canonical dot of one row and one token.
        for (; t + 6 <= n_tokens; t += 6) {
          __m512 acc[4][6];
          for (int j = 0; j < 4; ++j) {
            for (int u = 0; u < 6; ++u) acc[j][u] = _mm512_setzero_ps();
          }
          const float* xt = x + t * ldx;
          for (int64_t i = 0; i < w.cols; i += 16) {
            __m512 xv[6];
            for (int u = 0; u < 6; ++u) xv[u] = _mm512_loadu_ps(xt + u * ldx + i);
            for (int j = 0; j < 4; ++j) {
              const __m512 wv = _mm512_loadu_ps(rows[j] + i);
              for (int u = 0; u < 6; ++u) acc[j][u] = _mm512_fmadd_ps(wv, xv[u], acc[j][u]);
            }
          }
          for (int j = 0; j < 4; ++j) {
            for (int u = 0; u < 6; ++u) StoreScalar(out, t + u, r + j, CanonicalReduce(acc[j][u]));
          }
        }
      }
      for (; t + 4 <= n_tokens; t += 4) {
        __m512 acc[4][4];
        for (int j = 0; j < 4; ++j) {
          for (int u = 0; u < 4; ++u) acc[j][u] = _mm512_setzero_ps();
        }
        for (int64_t i = 0; i < w.cols; i += 16) {
          const __mmask16 m = MaskFor(w.cols - i);
          __m512 xv[4];
          for (int u = 0; u < 4; ++u) xv[u] = _mm512_maskz_loadu_ps(m, x + (t + u) * ldx + i);
          for (int j = 0; j < 4; ++j) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, rows[j] + i);
            for (int u = 0; u < 4; ++u) acc[j][u] = _mm512_fmadd_ps(wv, xv[u], acc[j][u]);
          }
        }
        for (int j = 0; j < 4; ++j) {
          for (int u = 0; u < 4; ++u) StoreScalar(out, t + u, r + j, CanonicalReduce(acc[j][u]));
        }
      }
      // The last 1-3 tokens together (4 rows x up to 3 tokens: independent accumulators, where
      // one canonical dot at a time would wait on its own chain of multiply-adds).
      const int64_t left = n_tokens - t;
      if (left == 1) {
        DenseRowsTokens<1>(rows, x + t * ldx, ldx, w.cols, out, t, r);
      } else if (left == 2) {
        DenseRowsTokens<2>(rows, x + t * ldx, ldx, w.cols, out, t, r);
      } else if (left == 3) {
        DenseRowsTokens<3>(rows, x + t * ldx, ldx, w.cols, out, t, r);
      }
    }
  }
  for (; r < row_end; ++r) {
    const float* row = RowAsFloat(w, r, scratch);
    int64_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) {
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
      for (int64_t i = 0; i < w.cols; i += 16) {
        const __mmask16 m = MaskFor(w.cols - i);
        const __m512 wv = _mm512_maskz_loadu_ps(m, row + i);
        for (int j = 0; j < 4; ++j) {
          acc[j] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + (t + j) * ldx + i), acc[j]);
        }
      }
      for (int j = 0; j < 4; ++j) StoreScalar(out, t + j, r, CanonicalReduce(acc[j]));
    }
    for (; t < n_tokens; ++t) {
      StoreScalar(out, t, r, CanonicalDot(row, x + t * ldx, w.cols));
    }
  }
}

// ---- small operations -------------------------------------------------------------------------

void Rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const float mean = SumOfSquares(x, n) / static_cast<float>(n);
  const __m512 inv = _mm512_set1_ps(1.0f / sqrtf(mean + eps));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = MaskFor(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i)));
  }
}

void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
          bool interleaved) {
  const int64_t half = head_dim / 2;
  if (interleaved || half % 16 != 0) {
    reference::Rope(x, n_heads, head_dim, cos, sin, interleaved);
    return;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; i += 16) {
      const __m512 c = _mm512_loadu_ps(cos + i), s = _mm512_loadu_ps(sin + i);
      const __m512 x0 = _mm512_loadu_ps(v + i), x1 = _mm512_loadu_ps(v + half + i);
      // Separate multiplies and subtraction, as the reference (no fused multiply-add here).
      _mm512_storeu_ps(v + i, _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s)));
      _mm512_storeu_ps(v + half + i, _mm512_add_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x0, s)));
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = MaskFor(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(Silu(g), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

double LogSumExp(const float* x, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    vmax =
        _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), MaskFor(n - i), x + i));
  }
  const float max = _mm512_reduce_max_ps(vmax);
  const __m512 m = _mm512_set1_ps(max);
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_add_ps(s0, Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), m)));
    s1 = _mm512_add_ps(s1, Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), m)));
  }
  for (; i < n; i += 16) {
    const __mmask16 k = MaskFor(n - i);
    s0 = _mm512_add_ps(
        s0, _mm512_maskz_mov_ps(k, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m))));
  }
  return static_cast<double>(max) +
         std::log(static_cast<double>(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1))));
}

// ---- machine ceilings ---------------------------------------------------------------------------

// The XOR of the 8 lanes: every bit of every lane reaches the result (an OR would hide a flipped
// bit that another lane has set).
inline uint64_t XorLanes(__m512i x) {
  const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
  const __m128i q = _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(q)) ^
         static_cast<uint64_t>(_mm_extract_epi64(q, 1));
}

uint64_t StreamRead(const uint8_t* data, size_t n_bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n_bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(data + i));
    a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(data + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(data + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(data + i + 192));
  }
  for (size_t i = n_bytes / 256 * 256; i + 64 <= n_bytes; i += 64) {  // the tail
    a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(data + i));
  }
  const __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return XorLanes(x);
}

uint64_t StreamReadPrefetched(const uint8_t* data, size_t n_bytes) {
  const size_t half = n_bytes / 256 * 128;  // bytes of each stream, a multiple of 128
  const uint8_t* second = data + half;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < half; i += 128) {
    // Prefetches past the end are harmless (they never fault).
    _mm_prefetch(reinterpret_cast<const char*>(data + i + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(data + i + kPrefetchBytes + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(second + i + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(second + i + kPrefetchBytes + 64), _MM_HINT_T0);
    a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(data + i));
    a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(data + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(second + i));
    a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(second + i + 64));
  }
  for (size_t i = 2 * half; i + 64 <= n_bytes; i += 64) {  // the tail
    a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(data + i));
  }
  const __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return XorLanes(x);
}

double Int8Peak(double seconds) {
  // Twelve independent VPDPBUSD chains in named registers (enough to cover the instruction's
  // latency at two per cycle), operands opaque to the compiler so nothing folds.
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  __asm__ volatile("" : "+v"(a), "+v"(b));
  __m512i c0 = a, c1 = a, c2 = a, c3 = a, c4 = a, c5 = a, c6 = a, c7 = a, c8 = a, c9 = a, c10 = a,
          c11 = a;
  uint64_t macs = 0;
  const int64_t start = NowNanos();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 14; ++it) {
      c0 = _mm512_dpbusd_epi32(c0, a, b);
      c1 = _mm512_dpbusd_epi32(c1, a, b);
      c2 = _mm512_dpbusd_epi32(c2, a, b);
      c3 = _mm512_dpbusd_epi32(c3, a, b);
      c4 = _mm512_dpbusd_epi32(c4, a, b);
      c5 = _mm512_dpbusd_epi32(c5, a, b);
      c6 = _mm512_dpbusd_epi32(c6, a, b);
      c7 = _mm512_dpbusd_epi32(c7, a, b);
      c8 = _mm512_dpbusd_epi32(c8, a, b);
      c9 = _mm512_dpbusd_epi32(c9, a, b);
      c10 = _mm512_dpbusd_epi32(c10, a, b);
      c11 = _mm512_dpbusd_epi32(c11, a, b);
      __asm__ volatile(""
                       : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6),
                         "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
    }
    macs += uint64_t{12} * 64 * (1u << 14);
    elapsed = static_cast<double>(NowNanos() - start) * 1e-9;
  }
  return static_cast<double>(macs) / elapsed;
}

#include "kernels/lora_expand.inc"

// lora_expand: one token with Q8_0 factors (decode with an int8 adapter package) in registers:
// per block of 32 outputs every rank row is added while the outputs stay in two vectors, with
// the rows' next blocks prefetched (16 short streams); the same operations in the same order as
// LoraExpandImpl (value = scale * code, then y + m[r] * value, no fused multiply-add). The rest
// goes to LoraExpandImpl.
void LoraExpand(const WeightMatrix& bt, const float* m, int64_t ldm, int64_t n, int64_t o_begin,
                int64_t o_end, float* y, int64_t ldy, bool accumulate) {
  if (n > 1) {
    constexpr int64_t kExpandTokens = 4;
    // Several tokens: per 256 outputs x 16 rank rows the tile converted once (LoraTile, exact),
    // then per group of four tokens 64 outputs in four vectors each while the rank rows are added
    // in order (each tile load serves the group's four tokens: 38 -> 50-65 GMAC/s on 64 tokens
    // here, LoraB/avx512/q8_0/64), the rest of the tokens one by one.
    alignas(64) float tile[kLoraTileRows * kLoraTileCols];
    for (int64_t b = o_begin; b < o_end; b += kLoraTileCols) {
      const int64_t e = std::min(o_end, b + kLoraTileCols);
      for (int64_t r0 = 0; r0 < bt.rows; r0 += kLoraTileRows) {
        const int64_t r1 = std::min(bt.rows, r0 + kLoraTileRows);
        LoraTile(bt, r0, r1, b, e, tile);
        // The next tile's bytes are fetched while this one is used for every token.
        const bool more_rows = r1 < bt.rows;
        const int64_t nb = more_rows ? b : e,
                      ne = more_rows ? e : std::min(o_end, e + kLoraTileCols);
        const int64_t nr0 = more_rows ? r1 : 0, nr1 = more_rows
                                                          ? std::min(bt.rows, r1 + kLoraTileRows)
                                                          : std::min(bt.rows, kLoraTileRows);
        if (nb < ne) {
          const size_t elem = bt.type == DType::kQ8_0  ? bt.q8_block_step()
                              : bt.type == DType::kF32 ? 128
                                                       : 64;
          const size_t first = static_cast<size_t>(nb / 32) * elem,
                       last = static_cast<size_t>((ne + 31) / 32) * elem;
          for (int64_t r = nr0; r < nr1; ++r) {
            const char* row = reinterpret_cast<const char*>(bt.row(r));
            for (size_t at = first; at < last; at += 64) _mm_prefetch(row + at, _MM_HINT_T0);
          }
        }
        int64_t t = 0;
        for (; t + kExpandTokens <= n; t += kExpandTokens) {
          for (int64_t o = b; o < e; o += 64) {
            __mmask16 k[4];
            __m512 acc[kExpandTokens][4];
            for (int j = 0; j < 4; ++j) k[j] = MaskFor(std::max<int64_t>(0, e - o - 16 * j));
            for (int u = 0; u < kExpandTokens; ++u) {
              for (int j = 0; j < 4; ++j) {
                acc[u][j] = accumulate || r0 > 0
                                ? _mm512_maskz_loadu_ps(k[j], y + (t + u) * ldy + o + 16 * j)
                                : _mm512_setzero_ps();
              }
            }
            for (int64_t r = r0; r < r1; ++r) {
              const float* w = tile + (r - r0) * kLoraTileCols + (o - b);
              __m512 wv[4];
              for (int j = 0; j < 4; ++j) wv[j] = _mm512_maskz_loadu_ps(k[j], w + 16 * j);
              for (int u = 0; u < kExpandTokens; ++u) {
                const __m512 sv = _mm512_set1_ps(m[(t + u) * ldm + r]);
                for (int j = 0; j < 4; ++j)
                  acc[u][j] = _mm512_add_ps(acc[u][j], _mm512_mul_ps(sv, wv[j]));
              }
            }
            for (int u = 0; u < kExpandTokens; ++u) {
              for (int j = 0; j < 4; ++j)
                _mm512_mask_storeu_ps(y + (t + u) * ldy + o + 16 * j, k[j], acc[u][j]);
            }
          }
        }
        for (; t < n; ++t) {
          float* out = y + t * ldy;
          const float* mt = m + t * ldm;
          for (int64_t o = b; o < e; o += 64) {
            __mmask16 k[4];
            __m512 acc[4];
            for (int j = 0; j < 4; ++j) {
              k[j] = MaskFor(std::max<int64_t>(0, e - o - 16 * j));
              acc[j] = accumulate || r0 > 0 ? _mm512_maskz_loadu_ps(k[j], out + o + 16 * j)
                                            : _mm512_setzero_ps();
            }
            for (int64_t r = r0; r < r1; ++r) {
              const __m512 sv = _mm512_set1_ps(mt[r]);
              const float* w = tile + (r - r0) * kLoraTileCols + (o - b);
              for (int j = 0; j < 4; ++j) {
                acc[j] = _mm512_add_ps(acc[j],
                                       _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(k[j], w + 16 * j)));
              }
            }
            for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(out + o + 16 * j, k[j], acc[j]);
          }
        }
      }
    }
    return;
  }
  if (bt.type != DType::kQ8_0) {
    LoraExpandImpl(bt, m, ldm, n, o_begin, o_end, y, ldy, accumulate);
    return;
  }
  // Prefetch distance: 8 blocks along a row (rows stored whole), or 8 blocks of every rank row
  // ahead in the one stream (blocked).
  const size_t step = bt.q8_block_step();
  const size_t ahead = 8 * step;
  const size_t rb = bt.row_bytes;
  for (int64_t base = o_begin / 32 * 32; base < o_end; base += 32) {
    const int64_t lo = std::max(o_begin, base) - base, hi = std::min(o_end, base + 32) - base;
    const uint32_t lanes = static_cast<uint32_t>(((uint64_t{1} << hi) - 1) >> lo << lo);
    const __mmask16 m0 = static_cast<__mmask16>(lanes), m1 = static_cast<__mmask16>(lanes >> 16);
    __m512 y0 = _mm512_setzero_ps(), y1 = _mm512_setzero_ps();
    if (accumulate) {
      y0 = _mm512_maskz_loadu_ps(m0, y + base);
      y1 = _mm512_maskz_loadu_ps(m1, y + base + 16);
    }
    const uint8_t* block = bt.data + static_cast<size_t>(base / 32) * step;
    for (int64_t r = 0; r < bt.rows; ++r, block += rb) {
      _mm_prefetch(reinterpret_cast<const char*>(block + ahead), _MM_HINT_T0);
      uint16_t h;
      std::memcpy(&h, block, 2);
      const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
      const __m512 sv = _mm512_set1_ps(m[r]);
      const __m512 v0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                             reinterpret_cast<const __m128i*>(block + 2)))));
      const __m512 v1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                             reinterpret_cast<const __m128i*>(block + 18)))));
      y0 = _mm512_add_ps(y0, _mm512_mul_ps(sv, v0));
      y1 = _mm512_add_ps(y1, _mm512_mul_ps(sv, v1));
    }
    _mm512_mask_storeu_ps(y + base, m0, y0);
    _mm512_mask_storeu_ps(y + base + 16, m1, y1);
  }
}

}  // namespace avx512

const KernelTable& Avx512Kernels() {
  static const KernelTable kTable = {
      .name = "avx512",
      .quantize_rows = avx512::QuantizeRows,
      .packed_gemm = avx512::PackedGemm,
      .prefill_gemm = nullptr,
      .dense_gemm = avx512::DenseGemm,
      .lora_expand = avx512::LoraExpand,
      .rmsnorm = avx512::Rmsnorm,
      .rope = avx512::Rope,
      .silu_mul = avx512::SiluMul,
      .kv_store = avx512::KvStore,
      .attention = avx512::Attention,
      .stream_read = avx512::StreamRead,
      .stream_read_prefetched = avx512::StreamReadPrefetched,
      .int8_peak = avx512::Int8Peak,
      .log_sum_exp = avx512::LogSumExp,
  };
  return kTable;
}

}  // namespace pocket
