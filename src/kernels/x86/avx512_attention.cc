// AVX-512 attention over the KV cache, and writing keys and values into it. Compiled with
// AVX-512 flags; called only when the CPU has them.
//
// Scores come 16 positions at a time from K's transposed blocks, with each K row loaded once for
// all query heads of the KV head (grouped-query attention shares the loads). The softmax is the
// online (running maximum) form, so a query never needs all its scores in memory at once, and
// the value rows are accumulated into registers a few heads at a time.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/x86/avx512_common.h"

namespace pocket {
namespace avx512 {
namespace {

// K row d of the block starting at position p0 (16 positions) as floats; for kQ8 the per-position
// scales are applied to the scores instead.
template <KvType kType>
inline __m512 LoadKRow(const KvHeadView& kv, int64_t block, int64_t d) {
  const int64_t idx = block * kv.head_dim * 16 + d * 16;
  if constexpr (kType == KvType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(kv.k) + idx);
  } else if constexpr (kType == KvType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(kv.k) + idx)));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(kv.k) + idx))));
  }
}

// 16 values of V row pos starting at column c, as floats (kQ8: unscaled codes).
template <KvType kType>
inline __m512 LoadV16(const KvHeadView& kv, int64_t pos, int64_t c) {
  const int64_t idx = pos * kv.head_dim + c;
  if constexpr (kType == KvType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(kv.v) + idx);
  } else if constexpr (kType == KvType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(kv.v) + idx)));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(kv.v) + idx))));
  }
}

constexpr int kMaxHeadChunk = 8;  // query heads whose scores are computed together

template <KvType kType>
void AttendToken(const AttentionTask& task, int64_t t, float* scratch) {
  const int32_t hd = task.kv.head_dim;
  const int32_t n_heads = task.n_q_heads;
  const int64_t n_pos = task.pos0 + t + 1;
  const int64_t n_blocks = (n_pos + 15) / 16;
  const float* q = task.q + t * task.ldq;
  // scratch: acc [n_heads][hd], then running max [n_heads], sum [n_heads], probs [n_heads][16].
  float* acc = scratch;
  float* run_max = acc + n_heads * hd;
  float* run_sum = run_max + n_heads;
  float* probs = run_sum + n_heads;  // reuses the tail: AttentionScratchFloats covers 16 per head
  for (int32_t i = 0; i < n_heads * hd; ++i) acc[i] = 0.0f;
  for (int32_t h = 0; h < n_heads; ++h) {
    run_max[h] = -INFINITY;
    run_sum[h] = 0.0f;
  }
  const __m512 vscale = _mm512_set1_ps(task.scale);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t valid = n_pos - 16 * b < 16 ? n_pos - 16 * b : 16;
    const __mmask16 mask = MaskFor(valid);
    for (int32_t h0 = 0; h0 < n_heads; h0 += kMaxHeadChunk) {
      const int32_t nh = n_heads - h0 < kMaxHeadChunk ? n_heads - h0 : kMaxHeadChunk;
      __m512 s[kMaxHeadChunk];
      for (int32_t h = 0; h < nh; ++h) s[h] = _mm512_setzero_ps();
      for (int32_t d = 0; d < hd; ++d) {
        const __m512 kd = LoadKRow<kType>(task.kv, b, d);
        for (int32_t h = 0; h < nh; ++h)
          s[h] = _mm512_fmadd_ps(_mm512_set1_ps(q[(h0 + h) * hd + d]), kd, s[h]);
      }
      __m512 kscale = vscale;
      if constexpr (kType == KvType::kQ8) {
        kscale = _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(mask, task.kv.k_scale + 16 * b));
      }
      for (int32_t h = 0; h < nh; ++h) {
        const __m512 sc =
            _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), mask, _mm512_mul_ps(s[h], kscale));
        const float block_max = _mm512_reduce_max_ps(sc);
        const int32_t hh = h0 + h;
        const float new_max = block_max > run_max[hh] ? block_max : run_max[hh];
        const float correction = std::exp(run_max[hh] - new_max);
        const __m512 p = _mm512_maskz_mov_ps(mask, Exp(_mm512_sub_ps(sc, _mm512_set1_ps(new_max))));
        run_sum[hh] = run_sum[hh] * correction + _mm512_reduce_add_ps(p);
        run_max[hh] = new_max;
        __m512 pw = p;
        if constexpr (kType == KvType::kQ8)
          pw = _mm512_mul_ps(p, _mm512_maskz_loadu_ps(mask, task.kv.v_scale + 16 * b));
        _mm512_storeu_ps(probs + hh * 16, pw);
        if (correction != 1.0f) {
          const __m512 vc = _mm512_set1_ps(correction);
          for (int32_t c = 0; c < hd; c += 16) {
            _mm512_storeu_ps(acc + hh * hd + c,
                             _mm512_mul_ps(_mm512_loadu_ps(acc + hh * hd + c), vc));
          }
        }
      }
    }
    // acc[h] += sum_j probs[h][j] * V[16 b + j], a few heads at a time so acc stays in registers.
    const int32_t chunk = hd >= 256 ? 1 : 256 / hd;  // heads per pass: chunk * hd / 16 <= 16 regs
    for (int32_t h0 = 0; h0 < n_heads; h0 += chunk) {
      const int32_t nh = n_heads - h0 < chunk ? n_heads - h0 : chunk;
      __m512 a[16];
      const int32_t nc = hd / 16;
      for (int32_t h = 0; h < nh; ++h)
        for (int32_t c = 0; c < nc; ++c)
          a[h * nc + c] = _mm512_loadu_ps(acc + (h0 + h) * hd + 16 * c);
      for (int64_t j = 0; j < valid; ++j) {
        const int64_t pos = 16 * b + j;
        for (int32_t c = 0; c < nc; ++c) {
          const __m512 v = LoadV16<kType>(task.kv, pos, 16 * c);
          for (int32_t h = 0; h < nh; ++h) {
            a[h * nc + c] =
                _mm512_fmadd_ps(_mm512_set1_ps(probs[(h0 + h) * 16 + j]), v, a[h * nc + c]);
          }
        }
      }
      for (int32_t h = 0; h < nh; ++h)
        for (int32_t c = 0; c < nc; ++c)
          _mm512_storeu_ps(acc + (h0 + h) * hd + 16 * c, a[h * nc + c]);
    }
  }
  float* out = task.out + t * task.ldo;
  for (int32_t h = 0; h < n_heads; ++h) {
    const __m512 inv = _mm512_set1_ps(1.0f / run_sum[h]);
    for (int32_t c = 0; c < hd; c += 16) {
      _mm512_storeu_ps(out + h * hd + c, _mm512_mul_ps(_mm512_loadu_ps(acc + h * hd + c), inv));
    }
  }
}

void StoreQ8(const float* x, int32_t n, int8_t* q, int64_t stride, float* scale) {
  __m512 vmax = _mm512_setzero_ps();
  for (int32_t i = 0; i < n; i += 16)
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(MaskFor(n - i), x + i)));
  const float amax = _mm512_reduce_max_ps(vmax);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *scale = amax / 127.0f;
  const __m512 vinv = _mm512_set1_ps(inv);
  alignas(64) int32_t codes[16];
  for (int32_t i = 0; i < n; i += 16) {
    const __mmask16 m = MaskFor(n - i);
    __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv));
    qi = _mm512_min_epi32(_mm512_max_epi32(qi, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
    if (stride == 1) {
      _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(qi));
    } else {
      _mm512_store_si512(codes, qi);
      for (int32_t j = 0; j < 16 && i + j < n; ++j)
        q[(i + j) * stride] = static_cast<int8_t>(codes[j]);
    }
  }
}

}  // namespace

void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv) {
  const int32_t hd = kv.head_dim;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = pos + i;
    const float* kr = k + i * ldk;
    const float* vr = v + i * ldv;
    const int64_t kbase = (p / 16) * hd * 16 + p % 16;
    switch (kv.type) {
      case KvType::kF32:
        for (int32_t d = 0; d < hd; ++d) static_cast<float*>(kv.k)[kbase + d * 16] = kr[d];
        std::memcpy(static_cast<float*>(kv.v) + p * hd, vr,
                    static_cast<size_t>(hd) * sizeof(float));
        break;
      case KvType::kF16: {
        uint16_t* kd = static_cast<uint16_t*>(kv.k);
        for (int32_t d = 0; d < hd; d += 16) {
          const __mmask16 m = MaskFor(hd - d);
          alignas(32) uint16_t h[16];
          _mm256_store_si256(
              reinterpret_cast<__m256i*>(h),
              _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, kr + d), _MM_FROUND_TO_NEAREST_INT));
          for (int32_t j = 0; j < 16 && d + j < hd; ++j) kd[kbase + (d + j) * 16] = h[j];
          _mm256_mask_storeu_epi16(
              static_cast<uint16_t*>(kv.v) + p * hd + d, m,
              _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, vr + d), _MM_FROUND_TO_NEAREST_INT));
        }
        break;
      }
      case KvType::kQ8:
        StoreQ8(kr, hd, static_cast<int8_t*>(kv.k) + kbase, 16, &kv.k_scale[p]);
        StoreQ8(vr, hd, static_cast<int8_t*>(kv.v) + p * hd, 1, &kv.v_scale[p]);
        break;
    }
  }
}

void Attention(const AttentionTask& task, float* scratch) {
  if (task.kv.head_dim % 16 != 0) {  // tiny heads (stories260K: 8): the reference is fine
    reference::Attention(task, scratch);
    return;
  }
  for (int64_t t = task.t_begin; t < task.t_end; ++t) {
    switch (task.kv.type) {
      case KvType::kF32:
        AttendToken<KvType::kF32>(task, t, scratch);
        break;
      case KvType::kF16:
        AttendToken<KvType::kF16>(task, t, scratch);
        break;
      case KvType::kQ8:
        AttendToken<KvType::kQ8>(task, t, scratch);
        break;
    }
  }
}

}  // namespace avx512
}  // namespace pocket
