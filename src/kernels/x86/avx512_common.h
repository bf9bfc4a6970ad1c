// Helpers shared by the AVX-512 translation units (avx512*.cc, amx.cc), which are compiled with
// AVX-512 flags. Everything here has internal linkage (an anonymous namespace), so no baseline
// translation unit can ever link against an AVX-512 copy of it. Include only from those files.
#pragma once

#include <immintrin.h>

#include <time.h>

#include <cstdint>

#include "kernels/kernel_table.h"

namespace pocket {
namespace avx512 {
namespace {

// Lanes [0, n) of 16 (all when n >= 16).
inline __mmask16 MaskFor(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// The canonical combine of 16 partial sums (reference/canonical.h): p[j] += p[j + 8], p[j] +=
// p[j + 4], p[j] += p[j + 2], p[0] + p[1].
inline float CanonicalReduce(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// sum_i a[i] * b[i] in the canonical order (lane i % 16 accumulates with fused multiply-add).
inline float CanonicalDot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = MaskFor(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return CanonicalReduce(acc);
}

inline float SumOfSquares(const float* a, int64_t n) {
  return CanonicalDot(a, a, n);
}

// The epilogue of one result v of token t at row r (kStore / kAccumulate), with out.add's term.
inline void StoreScalar(const GemmOut& out, int64_t t, int64_t r, float v) {
  if (out.add != nullptr) v += out.add[t * out.ld_add + r];
  float& y = out.y[t * out.ld + r];
  y = out.epilogue == Epilogue::kAccumulate ? y + v : v;
}

// exp(x) for x in float range: 2^n * p(r) with r = x - n ln2, |r| <= ln2 / 2, a degree-6
// polynomial (relative error about 2e-7); inputs are clamped to [-87.3, 88.7].
inline __m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline __m512 Silu(__m512 g) {
  return _mm512_div_ps(
      g, _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}

// The epilogue of one panel's 16 results v of token t at rows row0.. (those below `rows`):
// out.add's term, then kStore / kAccumulate (y + (v + add)).
inline void StorePanel(const GemmOut& out, int64_t t, int64_t row0, int64_t rows, __m512 v) {
  const int64_t n = rows - row0 < 16 ? rows - row0 : 16;
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1u);
  if (out.add != nullptr)
    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, out.add + t * out.ld_add + row0));
  float* y = out.y + t * out.ld + row0;
  if (out.epilogue == Epilogue::kAccumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
  _mm512_mask_storeu_ps(y, mask, v);
}

// The SwiGLU epilogue of 16 outputs of token t from column j0 (of rows / 2): silu(gate) * up, the
// add term's columns j0.. joining the gates and rows / 2 + j0.. the ups first.
inline void StoreSwiGlu(const GemmOut& out, int64_t rows, int64_t t, int64_t j0, __m512 gate,
                        __m512 up) {
  if (out.add != nullptr) {
    const float* add = out.add + t * out.ld_add + j0;
    gate = _mm512_add_ps(gate, _mm512_loadu_ps(add));
    up = _mm512_add_ps(up, _mm512_loadu_ps(add + rows / 2));
  }
  _mm512_storeu_ps(out.y + t * out.ld + j0, _mm512_mul_ps(Silu(gate), up));
}

}  // namespace

void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv);
void Attention(const AttentionTask& task, float* scratch);
void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out);

}  // namespace avx512
}  // namespace pocket
