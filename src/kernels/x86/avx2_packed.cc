// AVX2 packed integer matmul (the weights of every projection): bit-identical to the reference
// for the store and accumulate epilogues. Compiled with -mavx2 -mfma -mf16c only, so it runs on
// Haswell-class CPUs (no AVX-512, no AVX-VNNI).
//
// Integer dot products: VPMADDUBSW (unsigned bytes x signed bytes -> saturating int16 pairs),
// then VPMADDWD with ones (int16 pairs -> int32, one lane per row, the quad layout of
// quant/packed.h). Both are exact for the codes we feed them:
//   kU4: codes 0..15 times activations -127..127: |pair| <= 2 * 15 * 127 = 3810, so even eight
//        pair sums add up in int16 without overflow (30480 < 32767) before widening;
//   kU8: codes 0..255 would saturate (2 * 255 * 127 > 32767), so we multiply w = code - 128
//        (-128..127) instead, as maddubs(|w|, sign(a, w)) (|pair| <= 2 * 128 * 127 = 32512),
//        and add 128 * sum(a) back: the exact sum of code * a.
// The float epilogue per group is the reference's: acc = fma(s, fma(m, S, d * (float)iacc), acc).
// A 64-byte packed vector is two ymm registers: rows 0-7 and rows 8-15 ("halves").
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/x86/avx2_common.h"

namespace pocket {
namespace avx2 {
namespace {

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

inline __m256i Bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// sum over each row's quad of (code - 128) * a, exactly: w = code ^ 0x80 = code - 128 as int8.
inline __m256i DotU8(__m256i abs_w, __m256i w, __m256i a, __m256i ones) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(a, w)), ones);
}

// d and m of one half (8 rows) of a group's scales.
inline void GroupScales(const PanelGeometry& geo, const uint8_t* block, int half, __m256* d,
                        __m256* m) {
  const uint8_t* s = block + geo.code_bytes + 16 * half;
  *d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  *m = geo.explicit_min ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32)))
                        : _mm256_mul_ps(_mm256_set1_ps(geo.neg_zero_point), *d);
}

// acc = fma(s, fma(m, S, d * (float)iacc), acc), as the reference.
inline __m256 AccumulateGroup(__m256 acc, __m256i iacc, __m256 d, __m256 m, float s, float sum) {
  const __m256 v =
      _mm256_fmadd_ps(m, _mm256_set1_ps(sum), _mm256_mul_ps(d, _mm256_cvtepi32_ps(iacc)));
  return _mm256_fmadd_ps(_mm256_set1_ps(s), v, acc);
}

// 128 * S in every lane: the correction of the kU8 sign trick, where the integer sum starts
// (S = the group's exact sum of activations, stored as an integral float; |128 S| < 2^31).
// kU4 sums start at zero.
template <bool kU4>
inline __m256i InitialSum(const float* sum) {
  if constexpr (kU4) return _mm256_setzero_si256();
  return _mm256_slli_epi32(_mm256_cvttps_epi32(_mm256_broadcast_ss(sum)), 7);
}

// Software prefetch distance of the decode and few-row streams: with the sign-trick arithmetic per
// line the out-of-order window alone keeps too few cache misses in flight (measured: about 2x from
// DRAM).
constexpr int kPrefetchBytes = 4096;

// Half `half` (rows 8 half .. 8 half + 7) of one panel for kTokens tokens from t0: acc[t].
// kGroup: the group size when known at compile time (32: every GGUF layout), else 0.
template <bool kU4, int kTokens, int kGroup>
inline void PanelHalf(const PanelGeometry& geo, const uint8_t* panel, int half,
                      const QuantizedRows& a, int64_t t0, __m256* acc) {
  const int32_t group = kGroup != 0 ? kGroup : geo.group;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* aq[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    acc[t] = _mm256_setzero_ps();
    aq[t] = a.q + (t0 + t) * a.cols;
  }
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* block = panel + static_cast<size_t>(g) * geo.group_bytes;
    const uint8_t* codes = block + 32 * half;
    const int64_t col0 = g * group;
    __m256i iacc[kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t)
      iacc[t] = InitialSum<kU4>(a.sum + (t0 + t) * geo.n_groups + g);
    if constexpr (kU4) {
      const __m256i nib = _mm256_set1_epi8(0x0f);
      const int32_t nvec = group / 8;  // vectors per group; each holds quads i and i + nvec
      for (int32_t i0 = 0; i0 < nvec; i0 += 4) {
        __m256i acc16[kTokens];
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) acc16[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int32_t i = i0; i < i0 + 4; ++i) {
          const __m256i v = Load256(codes + 64 * i);
          const __m256i lo = _mm256_and_si256(v, nib);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 8
          for (int t = 0; t < kTokens; ++t) {
            const int8_t* ag = aq[t] + col0;
            acc16[t] = _mm256_add_epi16(acc16[t], _mm256_maddubs_epi16(lo, Bcast32(ag + 4 * i)));
            acc16[t] =
                _mm256_add_epi16(acc16[t], _mm256_maddubs_epi16(hi, Bcast32(ag + 4 * (i + nvec))));
          }
        }
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t)
          iacc[t] = _mm256_add_epi32(iacc[t], _mm256_madd_epi16(acc16[t], ones));
      }
    } else {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      const int32_t quads = group / 4;
#pragma GCC unroll 2
      for (int32_t i = 0; i < quads; ++i) {
        const __m256i w = _mm256_xor_si256(Load256(codes + 64 * i), flip);
        const __m256i abs_w = _mm256_abs_epi8(w);
#pragma GCC unroll 8
        for (int t = 0; t < kTokens; ++t) {
          iacc[t] = _mm256_add_epi32(iacc[t], DotU8(abs_w, w, Bcast32(aq[t] + col0 + 4 * i), ones));
        }
      }
    }
    __m256 d, m;
    GroupScales(geo, block, half, &d, &m);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const int64_t idx = (t0 + t) * geo.n_groups + g;
      acc[t] = AccumulateGroup(acc[t], iacc[t], d, m, a.scale[idx], a.sum[idx]);
    }
  }
}

// Stores 8 results of token t at rows row0.. (fewer at the end of the matrix), plus out.add's term.
inline void StoreHalf(const GemmOut& out, int64_t t, int64_t row0, int64_t rows, __m256 v) {
  const int64_t n = rows - row0;
  if (n <= 0) return;
  if (out.add != nullptr) v = _mm256_add_ps(v, LoadN(out.add + t * out.ld_add + row0, n));
  float* y = out.y + t * out.ld + row0;
  if (out.epilogue == Epilogue::kAccumulate) v = _mm256_add_ps(LoadN(y, n), v);
  StoreN(y, n, v);
}

// The SwiGLU epilogue of 8 outputs of token t from column j0 (of rows / 2): silu(gate) * up, the
// add term's columns j0.. joining the gates and rows / 2 + j0.. the ups first.
inline void StoreSwiGlu(const GemmOut& out, int64_t rows, int64_t t, int64_t j0, __m256 gate,
                        __m256 up) {
  if (out.add != nullptr) {
    const float* add = out.add + t * out.ld_add + j0;
    gate = _mm256_add_ps(gate, _mm256_loadu_ps(add));
    up = _mm256_add_ps(up, _mm256_loadu_ps(add + rows / 2));
  }
  _mm256_storeu_ps(out.y + t * out.ld + j0, _mm256_mul_ps(Silu(gate), up));
}

// Panels [panel_begin, panel_end), tokens [t_begin, t_end): panel by panel, so a panel's weights
// stay in cache while every block of kTokens tokens passes over them.
template <bool kU4, int kGroup>
void PanelRange(const PackedMatrix& w, const PanelGeometry& geo, const QuantizedRows& a,
                int64_t t_begin, int64_t t_end, int64_t panel_begin, int64_t panel_end,
                const GemmOut& out) {
  constexpr int kBlock = 4;
  const int64_t rows = w.layout.rows;
  const bool swiglu = out.epilogue == Epilogue::kSwiGlu;
  const int64_t step = swiglu ? 2 : 1;
  for (int64_t p = panel_begin; p < panel_end; p += step) {
    const uint8_t* panel = w.data + static_cast<size_t>(p) * geo.panel_bytes;
    const uint8_t* up_panel = panel + geo.panel_bytes;  // kSwiGlu only
    int64_t t = t_begin;
    auto run = [&]<int kTokens>() {
      for (int half = 0; half < 2; ++half) {
        __m256 acc[kTokens];
        PanelHalf<kU4, kTokens, kGroup>(geo, panel, half, a, t, acc);
        if (swiglu) {
          __m256 up[kTokens];
          PanelHalf<kU4, kTokens, kGroup>(geo, up_panel, half, a, t, up);
#pragma GCC unroll 8
          for (int j = 0; j < kTokens; ++j)
            StoreSwiGlu(out, rows, t + j, (p / 2) * 16 + 8 * half, acc[j], up[j]);
        } else {
#pragma GCC unroll 8
          for (int j = 0; j < kTokens; ++j) StoreHalf(out, t + j, p * 16 + 8 * half, rows, acc[j]);
        }
      }
      t += kTokens;
    };
    while (t + kBlock <= t_end) run.template operator()<kBlock>();
    if (t + 2 <= t_end) run.template operator()<2>();
    if (t < t_end) run.template operator()<1>();
  }
}

// s += maddubs(low nibbles of c, alo) + maddubs(high nibbles, ahi), each code byte loaded once.
// The empty asms keep the adds in this order: left to it, GCC reassociates a block's int16 adds
// into a tree that wants every product live at once, which 16 ymm registers cannot hold (it
// spilled about 24 registers a block and loaded every code byte twice).
inline void NibbleDot(__m256i c, __m256i nib, __m256i alo, __m256i ahi, __m256i& s) {
  __asm__("" : "+x"(c));  // in a register: not folded into the AND and loaded again for the shift
  const __m256i lo = _mm256_and_si256(c, nib);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), nib);
  s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo, alo));
  __asm__("" : "+x"(s));
  s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi, ahi));
  __asm__("" : "+x"(s));
}

// One token (the decode step), two panels at a time: independent dot-product chains for the four
// halves and two memory streams keep the loads in flight.
template <bool kU4>
inline void DecodeTwoPanels(const PanelGeometry& geo, const uint8_t* p0, const uint8_t* p1,
                            const QuantizedRows& a, int64_t t, __m256 out[4]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  const int8_t* aq = a.q + t * a.cols;
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const size_t group_off = static_cast<size_t>(g) * geo.group_bytes;
    const uint8_t* b0 = p0 + group_off;
    const uint8_t* b1 = p1 + group_off;
    // The pair reads [p0, p0 + 2 panels) as two streams, so a fixed distance ahead of panel 0's
    // stream soon lands in what panel 1's has read. Past its panel's end, each stream prefetches
    // the same point of the next pair's panel instead.
    const size_t ahead = group_off + kPrefetchBytes < geo.panel_bytes
                             ? kPrefetchBytes
                             : kPrefetchBytes + geo.panel_bytes;
    const uint8_t* f0 = b0 + ahead;
    const uint8_t* f1 = b1 + ahead;
    const int8_t* ag = aq + g * geo.group;
    // [panel 0 rows 0-7, panel 0 rows 8-15, panel 1 rows 0-7, panel 1 rows 8-15]
    const int64_t idx = t * geo.n_groups + g;
    __m256i i0 = InitialSum<kU4>(a.sum + idx), i1 = i0, i2 = i0, i3 = i0;
    if constexpr (kU4) {
      const __m256i nib = _mm256_set1_epi8(0x0f);
      const int32_t nvec = geo.group / 8;
      for (int32_t v0 = 0; v0 < nvec; v0 += 4) {
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
        for (int32_t i = v0; i < v0 + 4; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(f0 + 64 * i), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(f1 + 64 * i), _MM_HINT_T0);
          const __m256i alo = Bcast32(ag + 4 * i), ahi = Bcast32(ag + 4 * (i + nvec));
          NibbleDot(Load256(b0 + 64 * i), nib, alo, ahi, s0);
          NibbleDot(Load256(b0 + 64 * i + 32), nib, alo, ahi, s1);
          NibbleDot(Load256(b1 + 64 * i), nib, alo, ahi, s2);
          NibbleDot(Load256(b1 + 64 * i + 32), nib, alo, ahi, s3);
        }
        i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(s0, ones));
        i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(s1, ones));
        i2 = _mm256_add_epi32(i2, _mm256_madd_epi16(s2, ones));
        i3 = _mm256_add_epi32(i3, _mm256_madd_epi16(s3, ones));
      }
    } else {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      const int32_t quads = geo.group / 4;
      for (int32_t i = 0; i < quads; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(f0 + 64 * i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(f1 + 64 * i), _MM_HINT_T0);
        const __m256i av = Bcast32(ag + 4 * i);
        const __m256i w0 = _mm256_xor_si256(Load256(b0 + 64 * i), flip);
        const __m256i w1 = _mm256_xor_si256(Load256(b0 + 64 * i + 32), flip);
        const __m256i w2 = _mm256_xor_si256(Load256(b1 + 64 * i), flip);
        const __m256i w3 = _mm256_xor_si256(Load256(b1 + 64 * i + 32), flip);
        i0 = _mm256_add_epi32(i0, DotU8(_mm256_abs_epi8(w0), w0, av, ones));
        i1 = _mm256_add_epi32(i1, DotU8(_mm256_abs_epi8(w1), w1, av, ones));
        i2 = _mm256_add_epi32(i2, DotU8(_mm256_abs_epi8(w2), w2, av, ones));
        i3 = _mm256_add_epi32(i3, DotU8(_mm256_abs_epi8(w3), w3, av, ones));
      }
    }
    // The lines past the codes (the scales): prefetched too, or one line of a group in nine
    // (g64 with explicit minima) came from memory when the loop reached it.
    for (size_t off = geo.code_bytes; off < geo.group_bytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(f0 + off), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(f1 + off), _MM_HINT_T0);
    }
    const float s = a.scale[idx], sum = a.sum[idx];
    __m256 d, m;
    GroupScales(geo, b0, 0, &d, &m);
    acc[0] = AccumulateGroup(acc[0], i0, d, m, s, sum);
    GroupScales(geo, b0, 1, &d, &m);
    acc[1] = AccumulateGroup(acc[1], i1, d, m, s, sum);
    GroupScales(geo, b1, 0, &d, &m);
    acc[2] = AccumulateGroup(acc[2], i2, d, m, s, sum);
    GroupScales(geo, b1, 1, &d, &m);
    acc[3] = AccumulateGroup(acc[3], i3, d, m, s, sum);
  }
  for (int i = 0; i < 4; ++i) out[i] = acc[i];
}

template <bool kU4>
void DecodePanels(const PackedMatrix& w, const PanelGeometry& geo, const QuantizedRows& a,
                  int64_t t, int64_t panel_begin, int64_t panel_end, const GemmOut& out) {
  const int64_t rows = w.layout.rows;
  int64_t p = panel_begin;
  for (; p + 2 <= panel_end; p += 2) {
    __m256 r[4];
    DecodeTwoPanels<kU4>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes,
                         w.data + static_cast<size_t>(p + 1) * geo.panel_bytes, a, t, r);
    if (out.epilogue == Epilogue::kSwiGlu) {  // (gate, up) pair
      StoreSwiGlu(out, rows, t, (p / 2) * 16, r[0], r[2]);
      StoreSwiGlu(out, rows, t, (p / 2) * 16 + 8, r[1], r[3]);
    } else {
      for (int i = 0; i < 4; ++i) StoreHalf(out, t, p * 16 + 8 * i, rows, r[i]);
    }
  }
  // An odd count (never kSwiGlu, whose ranges cover whole pairs).
  if (p < panel_end) PanelRange<kU4, 0>(w, geo, a, t, t + 1, p, panel_end, out);
}

// ---- two tokens or more: passes over an interleaved row block --------------------------------

// The rows of one pass (at most kMaxPass tokens) interleaved once per panel chunk: q[quad][t][4]
// (the same 4 columns of every row of the pass side by side, R = the pass's row count), their
// scales and sums transposed to [group][t]. Every broadcast of a pass then comes from one pointer
// at a constant offset, and the unpacked code vector serves all R rows from registers.
constexpr int kMaxPass = 12;
constexpr int64_t kMaxBlockCols = 8192;  // wider rows take PanelRange
struct RowBlock {
  alignas(64) int8_t q[kMaxBlockCols * kMaxPass];
  alignas(64) float scale[kMaxBlockCols / 32 * kMaxPass];
  alignas(64) float sum[kMaxBlockCols / 32 * kMaxPass];
};

inline void InterleaveRows(const QuantizedRows& a, int64_t t0, int n, RowBlock* b) {
  const int64_t quads = a.cols / 4, n_groups = a.n_groups();
  for (int t = 0; t < n; ++t) {
    const int8_t* src = a.q + (t0 + t) * a.cols;
    for (int64_t q = 0; q < quads; ++q) std::memcpy(b->q + (q * n + t) * 4, src + 4 * q, 4);
    for (int64_t g = 0; g < n_groups; ++g) {
      b->scale[g * n + t] = a.scale[(t0 + t) * n_groups + g];
      b->sum[g * n + t] = a.sum[(t0 + t) * n_groups + g];
    }
  }
}

// Half `half` (rows 8 half .. 8 half + 7) of one group `block` for the kRows rows of the pass:
// f[t] += the group's term. The int16 sums of a window of four code vectors (eight pair sums per
// lane, <= 30480) stay in registers, one per row; the empty asms keep each row's adds a chain (GCC
// otherwise regroups them into trees that need every product live at once, and spills). Integer
// sums are exact, so their order does not change a bit; the float epilogue is the reference's.
template <bool kU4, int kRows, int kGroup>
__attribute__((always_inline)) inline void GroupHalf(const PanelGeometry& geo, const uint8_t* block,
                                                     int half, const int8_t* ag, const float* sc,
                                                     const float* sm, __m256* f) {
  const int32_t group = kGroup != 0 ? kGroup : geo.group;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* codes = block + 32 * half;
  __m256i i32[kRows];
  if constexpr (kU4) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const int32_t nvec = group / 8;  // vector i holds quads i (low nibbles) and i + nvec (high)
    const int8_t* ahi = ag + nvec * kRows * 4;
    for (int32_t w0 = 0; w0 < nvec; w0 += 4) {
      __m256i s[kRows];
#pragma GCC unroll 16
      for (int t = 0; t < kRows; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int32_t i = w0; i < w0 + 4; ++i) {
        __m256i v = Load256(codes + 64 * i);
        __asm__("" : "+x"(v));
        const __m256i lo = _mm256_and_si256(v, nib);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 16
        for (int t = 0; t < kRows; ++t) {
          s[t] =
              _mm256_add_epi16(s[t], _mm256_maddubs_epi16(lo, Bcast32(ag + (i * kRows + t) * 4)));
          __asm__("" : "+x"(s[t]));
        }
#pragma GCC unroll 16
        for (int t = 0; t < kRows; ++t) {
          s[t] =
              _mm256_add_epi16(s[t], _mm256_maddubs_epi16(hi, Bcast32(ahi + (i * kRows + t) * 4)));
          __asm__("" : "+x"(s[t]));
        }
      }
#pragma GCC unroll 16
      for (int t = 0; t < kRows; ++t) {
        const __m256i p = _mm256_madd_epi16(s[t], ones);
        i32[t] = w0 == 0 ? p : _mm256_add_epi32(i32[t], p);
      }
    }
  } else {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 16
    for (int t = 0; t < kRows; ++t) i32[t] = InitialSum<false>(sm + t);
    const int32_t quads = group / 4;
    for (int32_t i = 0; i < quads; ++i) {
      const __m256i w = _mm256_xor_si256(Load256(codes + 64 * i), flip);
      const __m256i abs_w = _mm256_abs_epi8(w);
#pragma GCC unroll 16
      for (int t = 0; t < kRows; ++t) {
        i32[t] = _mm256_add_epi32(i32[t], DotU8(abs_w, w, Bcast32(ag + (i * kRows + t) * 4), ones));
        __asm__("" : "+x"(i32[t]));
      }
    }
  }
  __m256 d, m;
  GroupScales(geo, block, half, &d, &m);
#pragma GCC unroll 16
  for (int t = 0; t < kRows; ++t) f[t] = AccumulateGroup(f[t], i32[t], d, m, sc[t], sm[t]);
}

// One panel for the kRows rows of `b`, group by group, both halves of a group before the next
// (prefetched ahead as in decode): f[t] rows 0-7 and f[kRows + t] rows 8-15. Not inlined, so
// that the register allocation of the loop does not depend on its caller. (Two panels at once,
// two memory streams as decode reads, made 2-4 rows faster on one thread but slower on two:
// `pocket bench --verify-cost -t 2 --kernels avx2` c(4) 1.40-1.43 with one panel, 1.64-1.67 with
// two; 4 sessions 2.31-2.43x against 2.06-2.18x.)
template <bool kU4, int kRows, int kGroup>
__attribute__((noinline)) void PassPanel(const PanelGeometry& geo, const uint8_t* panel,
                                         const RowBlock& b, __m256* f) {
  const int32_t group = kGroup != 0 ? kGroup : geo.group;
#pragma GCC unroll 32
  for (int t = 0; t < 2 * kRows; ++t) f[t] = _mm256_setzero_ps();
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* block = panel + static_cast<size_t>(g) * geo.group_bytes;
    for (size_t off = 0; off < geo.group_bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(block + off + kPrefetchBytes), _MM_HINT_T0);
    const int8_t* ag = b.q + g * group * kRows;
    const float* sc = b.scale + g * kRows;
    const float* sm = b.sum + g * kRows;
    GroupHalf<kU4, kRows, kGroup>(geo, block, 0, ag, sc, sm, f);
    GroupHalf<kU4, kRows, kGroup>(geo, block, 1, ag, sc, sm, f + kRows);
  }
}

// Panels [panel_begin, panel_end) for the kRows rows of `b`, tokens t0...
template <bool kU4, int kRows, int kGroup>
void PassPanels(const PackedMatrix& w, const PanelGeometry& geo, const RowBlock& b, int64_t t0,
                int64_t panel_begin, int64_t panel_end, const GemmOut& out) {
  const int64_t rows = w.layout.rows;
  const bool swiglu = out.epilogue == Epilogue::kSwiGlu;
  __m256 f[2 * kRows], up[2 * kRows];
  for (int64_t p = panel_begin; p < panel_end; p += swiglu ? 2 : 1) {
    const uint8_t* panel = w.data + static_cast<size_t>(p) * geo.panel_bytes;
    PassPanel<kU4, kRows, kGroup>(geo, panel, b, f);
    if (swiglu) {
      PassPanel<kU4, kRows, kGroup>(geo, panel + geo.panel_bytes, b, up);
      for (int half = 0; half < 2; ++half) {
        for (int t = 0; t < kRows; ++t) {
          StoreSwiGlu(out, rows, t0 + t, (p / 2) * 16 + 8 * half, f[half * kRows + t],
                      up[half * kRows + t]);
        }
      }
    } else {
      for (int half = 0; half < 2; ++half) {
        for (int t = 0; t < kRows; ++t)
          StoreHalf(out, t0 + t, p * 16 + 8 * half, rows, f[half * kRows + t]);
      }
    }
  }
}

// Weight bytes of the panels every pass goes over before the next chunk (kept in L2: a second
// pass reads them from there, not from memory).
constexpr size_t kPassChunkBytes = size_t{256} << 10;

// Every token in passes of at most kMaxPass rows, as even as possible (13 = 7 + 6, not 12 + 1:
// a short pass unpacks the weights for few rows), over chunks of panels (an even count: SwiGLU
// pairs stay together). Not inlined: its row block stays off the decode path's stack.
template <bool kU4, int kGroup>
__attribute__((noinline)) void BlockedRows(const PackedMatrix& w, const PanelGeometry& geo,
                                           const QuantizedRows& a, int64_t panel_begin,
                                           int64_t panel_end, const GemmOut& out) {
  RowBlock b;
  // One pass (the engine's sessions, a draft being verified) reads each panel once: no chunks,
  // so its rows are interleaved once.
  const int64_t chunk =
      a.n_tokens <= kMaxPass
          ? panel_end - panel_begin
          : std::max<int64_t>(
                2, static_cast<int64_t>(kPassChunkBytes / geo.panel_bytes) & ~int64_t{1});
  for (int64_t c0 = panel_begin; c0 < panel_end; c0 += chunk) {
    const int64_t c1 = std::min(panel_end, c0 + chunk);
    for (int64_t t = 0; t < a.n_tokens;) {
      const int64_t left = a.n_tokens - t;
      const int64_t passes = (left + kMaxPass - 1) / kMaxPass;
      const int take = static_cast<int>((left + passes - 1) / passes);
      InterleaveRows(a, t, take, &b);
      auto run = [&]<int kRows>() { PassPanels<kU4, kRows, kGroup>(w, geo, b, t, c0, c1, out); };
      switch (take) {
        case 1:
          run.template operator()<1>();
          break;
        case 2:
          run.template operator()<2>();
          break;
        case 3:
          run.template operator()<3>();
          break;
        case 4:
          run.template operator()<4>();
          break;
        case 5:
          run.template operator()<5>();
          break;
        case 6:
          run.template operator()<6>();
          break;
        case 7:
          run.template operator()<7>();
          break;
        case 8:
          run.template operator()<8>();
          break;
        case 9:
          run.template operator()<9>();
          break;
        case 10:
          run.template operator()<10>();
          break;
        case 11:
          run.template operator()<11>();
          break;
        default:
          static_assert(kMaxPass == 12);
          run.template operator()<12>();
          break;
      }
      t += take;
    }
  }
}

template <bool kU4>
void Gemm(const PackedMatrix& w, const PanelGeometry& geo, const QuantizedRows& a,
          int64_t panel_begin, int64_t panel_end, const GemmOut& out) {
  if (a.n_tokens == 1) {
    DecodePanels<kU4>(w, geo, a, 0, panel_begin, panel_end, out);
  } else if (a.cols <= kMaxBlockCols) {
    if (geo.group == 32) {
      BlockedRows<kU4, 32>(w, geo, a, panel_begin, panel_end, out);
    } else {
      BlockedRows<kU4, 0>(w, geo, a, panel_begin, panel_end, out);
    }
  } else if (geo.group == 32) {
    PanelRange<kU4, 32>(w, geo, a, 0, a.n_tokens, panel_begin, panel_end, out);
  } else {
    PanelRange<kU4, 0>(w, geo, a, 0, a.n_tokens, panel_begin, panel_end, out);
  }
}

}  // namespace

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  const PanelGeometry geo = Geometry(w.layout);
  if (geo.u4) {
    Gemm<true>(w, geo, a, panel_begin, panel_end, out);
  } else {
    Gemm<false>(w, geo, a, panel_begin, panel_end, out);
  }
}

}  // namespace avx2
}  // namespace pocket
