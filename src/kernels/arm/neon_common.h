// Helpers shared by the ARM64 translation units (neon*.cc, dotprod.cc, i8mm.cc), each compiled
// with its own -march. Everything defined here has internal linkage (an anonymous namespace), so
// every file gets its own copy built with its own flags and no baseline translation unit can ever
// link a dotprod / i8mm copy. Include only from those files.
//
// Float reductions follow reference/canonical.h with four 4-lane accumulators: partial i % 16 of
// the reference is lane i % 4 of accumulator (i % 16) / 4.
#pragma once

#include <arm_neon.h>

#include <time.h>

#include <cstdint>

#include "kernels/kernel_table.h"

namespace pocket {
namespace arm {
namespace {

// The canonical combine of 16 partials held as a[0..3] (reference/canonical.h):
// p[j] += p[j + 8], p[j] += p[j + 4], p[j] += p[j + 2], p[0] + p[1].
inline float CanonicalReduce(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
  a0 = vaddq_f32(a0, a2);
  a1 = vaddq_f32(a1, a3);
  a0 = vaddq_f32(a0, a1);
  const float32x2_t b = vadd_f32(vget_low_f32(a0), vget_high_f32(a0));
  return vget_lane_f32(b, 0) + vget_lane_f32(b, 1);
}

// Lanes [0, n) of p (n < 4), the rest zero.
inline float32x4_t LoadPartial(const float* p, int64_t n) {
  float tmp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
  return vld1q_f32(tmp);
}

// kTokens canonical dot products of one row w with rows x[t] (n elements each): the row's loads
// are shared; every token keeps its own 16 partials (4 registers).
template <int kTokens>
inline void CanonicalDots(const float* w, const float* const* x, int64_t n, float* out) {
  float32x4_t acc[kTokens][4];
  for (int t = 0; t < kTokens; ++t)
    for (int c = 0; c < 4; ++c) acc[t][c] = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int c = 0; c < 4; ++c) {
      const float32x4_t wv = vld1q_f32(w + i + 4 * c);
      for (int t = 0; t < kTokens; ++t)
        acc[t][c] = vfmaq_f32(acc[t][c], wv, vld1q_f32(x[t] + i + 4 * c));
    }
  }
  // The tail: whole vectors, then one zero-padded vector (partials without elements untouched).
  for (int c = 0; i < n; i += 4, ++c) {
    const int64_t left = n - i;
    const float32x4_t wv = left >= 4 ? vld1q_f32(w + i) : LoadPartial(w + i, left);
    for (int t = 0; t < kTokens; ++t) {
      const float32x4_t xv = left >= 4 ? vld1q_f32(x[t] + i) : LoadPartial(x[t] + i, left);
      acc[t][c] = vfmaq_f32(acc[t][c], wv, xv);
    }
  }
  for (int t = 0; t < kTokens; ++t)
    out[t] = CanonicalReduce(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
}

inline float CanonicalDot(const float* a, const float* b, int64_t n) {
  float r;
  CanonicalDots<1>(a, &b, n, &r);
  return r;
}

// exp(x): 2^n * p(r) with r = x - n ln2 (|r| <= ln2 / 2), a degree-6 polynomial (relative error
// about 2e-7); inputs clamped to [-87.3, 88.3] so 2^n stays a normal float.
inline float32x4_t Exp(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.3f)), vdupq_n_f32(88.3f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693145751953125f));
  r = vfmsq_f32(r, n, vdupq_n_f32(1.428606765330187045e-06f));
  float32x4_t p = vdupq_n_f32(1.0f / 720.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

inline float32x4_t Silu(float32x4_t g) {
  return vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), Exp(vnegq_f32(g))));
}

// 4 fp16 values as floats (exact).
inline float32x4_t LoadF16(const uint16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

inline int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- packed integer matmul: the part every ISA shares
// --------------------------------------------

struct PanelGeometry {
  bool explicit_min;
  float neg_zero_point;  // symmetric layouts: m = neg_zero_point * d
  int32_t group;
  int64_t n_groups;
  size_t code_bytes;
  size_t group_bytes;
  size_t panel_bytes;
};

inline PanelGeometry Geometry(const PackedLayout& l) {
  const bool u4 = l.codes == PackedCodes::kU4;
  PanelGeometry g;
  g.group = l.group;
  g.n_groups = l.cols / l.group;
  g.code_bytes = static_cast<size_t>(l.group) * 16 * (u4 ? 4 : 8) / 8;
  g.explicit_min = l.explicit_min;
  g.neg_zero_point = u4 ? -8.0f : -128.0f;
  g.group_bytes = g.code_bytes + (g.explicit_min ? 64 : 32);
  g.panel_bytes = g.group_bytes * static_cast<size_t>(g.n_groups);
  return g;
}

// Float results of one panel (16 rows, 4 registers) for K::kTokens tokens tok[t], group by group:
// the integer sums iacc (exact) come from K::Dots, then acc = fma(s, fma(m, S, d * iacc), acc) as
// the reference. K::kBiasedU8: K computed u8 codes as signed (code - 128), so 128 * S is added back
// (an exact integer correction; S is the group's sum of q).
template <class K, bool kU4>
inline void PanelAccumulate(const PanelGeometry& geo, const uint8_t* panel, const QuantizedRows& a,
                            const int64_t* tok, float32x4_t (*acc)[4]) {
  constexpr int kTokens = K::kTokens;
  for (int t = 0; t < kTokens; ++t)
    for (int j = 0; j < 4; ++j) acc[t][j] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < geo.n_groups; ++g) {
    const uint8_t* block = panel + static_cast<size_t>(g) * geo.group_bytes;
    const int8_t* aq[kTokens];
    for (int t = 0; t < kTokens; ++t) aq[t] = a.q + tok[t] * a.cols + g * geo.group;
    int32x4_t iacc[kTokens][4];
    K::template Dots<kU4>(block, geo.group, aq, iacc);
    const uint16_t* scales = reinterpret_cast<const uint16_t*>(block + geo.code_bytes);
    float32x4_t d[4], m[4];
    for (int j = 0; j < 4; ++j) {
      d[j] = LoadF16(scales + 4 * j);
      m[j] = geo.explicit_min ? LoadF16(scales + 16 + 4 * j)
                              : vmulq_f32(vdupq_n_f32(geo.neg_zero_point), d[j]);
    }
    for (int t = 0; t < kTokens; ++t) {
      const int64_t idx = tok[t] * geo.n_groups + g;
      const float sum = a.sum[idx];
      const float32x4_t vsum = vdupq_n_f32(sum), vs = vdupq_n_f32(a.scale[idx]);
      int32x4_t bias = vdupq_n_s32(0);
      if constexpr (!kU4 && K::kBiasedU8) bias = vdupq_n_s32(128 * static_cast<int32_t>(sum));
      for (int j = 0; j < 4; ++j) {
        const float32x4_t fi = vcvtq_f32_s32(vaddq_s32(iacc[t][j], bias));
        const float32x4_t v = vfmaq_f32(vmulq_f32(d[j], fi), m[j], vsum);
        acc[t][j] = vfmaq_f32(acc[t][j], vs, v);
      }
    }
  }
}

// Rows [row0, row0 + 16) of token t (those below `rows`), plus out.add's term, stored or
// accumulated (y + (v + add)).
inline void StorePanel(const GemmOut& out, int64_t t, int64_t row0, int64_t rows,
                       const float32x4_t* v) {
  float* y = out.y + t * out.ld + row0;
  const float* add = out.add != nullptr ? out.add + t * out.ld_add + row0 : nullptr;
  const bool accumulate = out.epilogue == Epilogue::kAccumulate;
  if (rows - row0 >= 16) {
    for (int j = 0; j < 4; ++j) {
      const float32x4_t vj = add != nullptr ? vaddq_f32(v[j], vld1q_f32(add + 4 * j)) : v[j];
      vst1q_f32(y + 4 * j, accumulate ? vaddq_f32(vld1q_f32(y + 4 * j), vj) : vj);
    }
    return;
  }
  float tmp[16];
  for (int j = 0; j < 4; ++j) vst1q_f32(tmp + 4 * j, v[j]);
  for (int64_t r = 0; r < rows - row0; ++r) {
    const float vr = add != nullptr ? tmp[r] + add[r] : tmp[r];
    y[r] = accumulate ? y[r] + vr : vr;
  }
}

// The SwiGLU epilogue of 16 outputs of token t from column j0 (of rows / 2): silu(gate) * up, the
// add term's columns j0.. joining the gates and rows / 2 + j0.. the ups first.
inline void StoreSwiGlu(const GemmOut& out, int64_t rows, int64_t t, int64_t j0,
                        const float32x4_t* gate, const float32x4_t* up) {
  float* y = out.y + t * out.ld + j0;
  const float* add = out.add != nullptr ? out.add + t * out.ld_add + j0 : nullptr;
  for (int j = 0; j < 4; ++j) {
    float32x4_t g = gate[j], u = up[j];
    if (add != nullptr) {
      g = vaddq_f32(g, vld1q_f32(add + 4 * j));
      u = vaddq_f32(u, vld1q_f32(add + rows / 2 + 4 * j));
    }
    vst1q_f32(y + 4 * j, vmulq_f32(Silu(g), u));
  }
}

// Panels [panel_begin, panel_end) for the K::kTokens tokens starting at t0.
template <class K, bool kU4>
inline void PanelsForTokens(const PackedMatrix& w, const PanelGeometry& geo, const QuantizedRows& a,
                            int64_t t0, int64_t panel_begin, int64_t panel_end,
                            const GemmOut& out) {
  constexpr int kTokens = K::kTokens;
  int64_t tok[kTokens];
  for (int t = 0; t < kTokens; ++t) tok[t] = t0 + t;
  if (out.epilogue == Epilogue::kSwiGlu) {  // (gate, up) panel pairs
    for (int64_t p = panel_begin; p < panel_end; p += 2) {
      float32x4_t gate[kTokens][4], up[kTokens][4];
      PanelAccumulate<K, kU4>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes, a, tok, gate);
      PanelAccumulate<K, kU4>(geo, w.data + static_cast<size_t>(p + 1) * geo.panel_bytes, a, tok,
                              up);
      for (int t = 0; t < kTokens; ++t)
        StoreSwiGlu(out, w.layout.rows, tok[t], (p / 2) * 16, gate[t], up[t]);
    }
    return;
  }
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    float32x4_t acc[kTokens][4];
    PanelAccumulate<K, kU4>(geo, w.data + static_cast<size_t>(p) * geo.panel_bytes, a, tok, acc);
    for (int t = 0; t < kTokens; ++t) StorePanel(out, tok[t], p * 16, w.layout.rows, acc[t]);
  }
}

// The packed matmul of one ISA: blocks of Block::kTokens tokens (weights reused from registers and
// L1 across the block), then the remaining tokens (and the decode step) one by one with Single.
template <class Block, class Single, bool kU4>
inline void PackedGemmTokens(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                             int64_t panel_end, const GemmOut& out) {
  static_assert(Single::kTokens == 1, "Single handles one token");
  const PanelGeometry geo = Geometry(w.layout);
  int64_t t = 0;
  for (; t + Block::kTokens <= a.n_tokens; t += Block::kTokens)
    PanelsForTokens<Block, kU4>(w, geo, a, t, panel_begin, panel_end, out);
  for (; t < a.n_tokens; ++t)
    PanelsForTokens<Single, kU4>(w, geo, a, t, panel_begin, panel_end, out);
}

template <class Block, class Single>
inline void PackedGemmFor(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                          int64_t panel_end, const GemmOut& out) {
  if (w.layout.codes == PackedCodes::kU4) {
    PackedGemmTokens<Block, Single, true>(w, a, panel_begin, panel_end, out);
  } else {
    PackedGemmTokens<Block, Single, false>(w, a, panel_begin, panel_end, out);
  }
}

// The 4 bytes at p broadcast to every 32-bit lane (a quad of activations).
inline int8x16_t BroadcastQuad(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

}  // namespace

// The baseline NEON table's kernels (neon.cc, neon_attention.cc), which the dotprod and i8mm
// tables reuse where their instructions add nothing.
namespace neon {
void QuantizeRows(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                  const float* norm_weight, float eps, QuantizedRows* out);
void DenseGemm(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
               int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch);
void Rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y);
void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
          bool interleaved);
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv);
void Attention(const AttentionTask& task, float* scratch);
uint64_t StreamRead(const uint8_t* data, size_t n_bytes);
uint64_t StreamReadPrefetched(const uint8_t* data, size_t n_bytes);
}  // namespace neon

}  // namespace arm
}  // namespace pocket
