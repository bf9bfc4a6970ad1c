// Helpers shared by the AVX2 translation units (avx2.cc, avx2_attention.cc), which are compiled
// with -mavx2 -mfma -mf16c. Everything here has internal linkage (an anonymous namespace), so no
// baseline translation unit can ever link against an AVX2 copy of it. Include only from those
// files. A 16-lane canonical partial-sum vector (reference/canonical.h) is a pair of 8-lane
// registers here: lanes 0-7 and lanes 8-15.
#pragma once

#include <immintrin.h>

#include <time.h>

#include <cstdint>

#include "kernels/kernel_table.h"

namespace pocket {
namespace avx2 {
namespace {

// An integer lane mask for lanes [0, n) of 8 (maskload / maskstore), n clamped to [0, 8].
inline __m256i MaskFor(int64_t n) {
  const int32_t k = n <= 0 ? 0 : n >= 8 ? 8 : static_cast<int32_t>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Lanes [0, n) of 8 floats from p, zeros elsewhere; reads nothing past p[n - 1].
inline __m256 LoadN(const float* p, int64_t n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  if (n <= 0) return _mm256_setzero_ps();
  return _mm256_maskload_ps(p, MaskFor(n));
}

inline void StoreN(float* p, int64_t n, __m256 v) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
  } else if (n > 0) {
    _mm256_maskstore_ps(p, MaskFor(n), v);
  }
}

inline float HorizontalMax(__m256 v) {
  const __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(b, _mm_shuffle_ps(b, b, 1)));
}

inline float HorizontalAdd(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

inline int32_t HorizontalAddInt(__m256i v) {
  const __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i b = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(b, _mm_shuffle_epi32(b, 0xb1)));
}

// The canonical combine of 16 partial sums held as lo (partials 0-7) and hi (8-15): p[j] +=
// p[j + 8], p[j] += p[j + 4], p[j] += p[j + 2], p[0] + p[1].
inline float CanonicalReduce(__m256 lo, __m256 hi) {
  const __m256 a = _mm256_add_ps(lo, hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// sum_i a[i] * b[i] in the canonical order (partial i % 16 accumulates with fused multiply-add).
// Lanes past n load as zeros, and fma(0, 0, p) == p, so a tail leaves its partials as they were.
inline float CanonicalDot(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
  }
  if (i < n) {
    lo = _mm256_fmadd_ps(LoadN(a + i, n - i), LoadN(b + i, n - i), lo);
    hi = _mm256_fmadd_ps(LoadN(a + i + 8, n - i - 8), LoadN(b + i + 8, n - i - 8), hi);
  }
  return CanonicalReduce(lo, hi);
}

inline float SumOfSquares(const float* a, int64_t n) {
  return CanonicalDot(a, a, n);
}

// sqrt with the IEEE result (as std::sqrt), without a call into shared inline code.
inline float Sqrt(float x) {
  return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x)));
}

// The epilogue of one result v of token t at row r (kStore / kAccumulate), with out.add's term.
inline void StoreScalar(const GemmOut& out, int64_t t, int64_t r, float v) {
  if (out.add != nullptr) v += out.add[t * out.ld_add + r];
  float& y = out.y[t * out.ld + r];
  y = out.epilogue == Epilogue::kAccumulate ? y + v : v;
}

// exp(x): 2^n * p(r) with r = x - n ln2, |r| <= ln2 / 2, a degree-6 polynomial (relative error
// about 2e-7). Inputs are clamped to [-87.3, 88.3] so n stays in [-126, 127] and 2^n can be
// built directly in the exponent field.
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline __m256 Silu(__m256 g) {
  return _mm256_div_ps(
      g, _mm256_add_ps(_mm256_set1_ps(1.0f), Exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}

// 8 int32 lanes (each already in [-127, 127]) x 4 registers -> 32 int8 in lane order.
inline __m256i PackToInt8(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  // packs work per 128-bit half: the bytes come out as dwords q0[0-3], q1[0-3], q2[0-3],
  // q3[0-3], q0[4-7], q1[4-7], q2[4-7], q3[4-7]; one permutation puts them in order.
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Round half to even (the default MXCSR mode, as the reference's nearbyint), clamped to
// [-127, 127] as int32 lanes.
inline __m256i QuantizeLanes(__m256 v, __m256 inv) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, inv));
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

inline int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

// Defined in avx2_packed.cc.
void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out);
// Defined in avx2_attention.cc.
void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv);
void Attention(const AttentionTask& task, float* scratch);

}  // namespace avx2
}  // namespace pocket
