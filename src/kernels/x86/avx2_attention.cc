// AVX2 attention over the KV cache, and writing keys and values into it. Compiled with
// -mavx2 -mfma -mf16c; called only when the CPU has them. Mirrors avx512_attention.cc with 8-lane
// vectors: a block of 16 positions is a pair of registers (positions 0-7 and 8-15).
//
// Scores come 16 positions at a time from K's transposed blocks, with each K row loaded once for
// a chunk of query heads (grouped-query attention shares the loads). The softmax is the online
// (running maximum) form, so a query never needs all its scores in memory at once, and the value
// rows are accumulated into registers a few heads and columns at a time.
#include <immintrin.h>
#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/x86/avx2_common.h"

namespace pocket {
namespace avx2 {
namespace {

// One K row of a block (16 positions: KvHeadView::KeyRow) as floats: lo = positions 0-7, hi =
// 8-15. For kQ8 the per-position scales are applied to the scores instead.
template <KvType kType>
inline void LoadKRow(const KvElement<kType>* k, __m256* lo, __m256* hi) {
  if constexpr (kType == KvType::kF32) {
    *lo = _mm256_loadu_ps(k);
    *hi = _mm256_loadu_ps(k + 8);
  } else if constexpr (kType == KvType::kF16) {
    *lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k)));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + 8)));
  } else {
    *lo = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k))));
    *hi = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k + 8))));
  }
}

// 8 values of a V row (KvHeadView::ValueRow) from column c, as floats (kQ8: unscaled codes).
template <KvType kType>
inline __m256 LoadV8(const KvElement<kType>* v, int64_t c) {
  if constexpr (kType == KvType::kF32) {
    return _mm256_loadu_ps(v + c);
  } else if constexpr (kType == KvType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + c)));
  } else {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + c))));
  }
}

// Per-token state in scratch: acc [n_heads][hd], running max [n_heads], sum [n_heads], then the
// probabilities of the current block [n_heads][16] (AttentionScratchFloats covers them).
struct TokenState {
  float* acc;
  float* run_max;
  float* run_sum;
  float* probs;
};

constexpr int kMaxScoreHeads = 4;  // query heads whose scores are computed together (8 registers)

// Scores of block b for kHeads query heads from h0, then the online-softmax update of those heads:
// probabilities (times the V scales for kQ8) into st.probs, running max / sum, acc rescaled.
template <KvType kType, int kHeads>
void ScoreBlock(const AttentionTask& task, const float* q, int64_t b, uint32_t lanes, int32_t h0,
                const TokenState& st) {
  const int32_t hd = task.kv.head_dim;
  __m256 s[2 * kHeads];
#pragma GCC unroll 8
  for (int h = 0; h < 2 * kHeads; ++h) s[h] = _mm256_setzero_ps();
  const KvElement<kType>* kb = task.kv.KeyBlock<const KvElement<kType>>(b);
  for (int32_t d = 0; d < hd; ++d) {
    __m256 klo, khi;
    LoadKRow<kType>(kb + d * kKvBlockPositions, &klo, &khi);
#pragma GCC unroll 8
    for (int h = 0; h < kHeads; ++h) {
      const __m256 qd = _mm256_broadcast_ss(q + (h0 + h) * hd + d);
      s[2 * h] = _mm256_fmadd_ps(qd, klo, s[2 * h]);
      s[2 * h + 1] = _mm256_fmadd_ps(qd, khi, s[2 * h + 1]);
    }
  }
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i mlo = _mm256_cmpeq_epi32(
      _mm256_and_si256(_mm256_set1_epi32(static_cast<int32_t>(lanes & 0xffu)), bit), bit);
  const __m256i mhi = _mm256_cmpeq_epi32(
      _mm256_and_si256(_mm256_set1_epi32(static_cast<int32_t>(lanes >> 8)), bit), bit);
  __m256 scale_lo = _mm256_set1_ps(task.scale), scale_hi = scale_lo;
  __m256 vs_lo = _mm256_set1_ps(1.0f), vs_hi = vs_lo;
  if constexpr (kType == KvType::kQ8) {
    const float* ks = task.kv.KeyScales(b);
    const float* vs = task.kv.ValueScales(b);
    scale_lo = _mm256_mul_ps(scale_lo, _mm256_maskload_ps(ks, mlo));
    scale_hi = _mm256_mul_ps(scale_hi, _mm256_maskload_ps(ks + 8, mhi));
    vs_lo = _mm256_maskload_ps(vs, mlo);
    vs_hi = _mm256_maskload_ps(vs + 8, mhi);
  }
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 flo = _mm256_castsi256_ps(mlo), fhi = _mm256_castsi256_ps(mhi);
#pragma GCC unroll 8
  for (int h = 0; h < kHeads; ++h) {
    const int32_t hh = h0 + h;
    const __m256 sc_lo = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s[2 * h], scale_lo), flo);
    const __m256 sc_hi = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s[2 * h + 1], scale_hi), fhi);
    // The maximum is only reduced when some score passes the running one (rare after the first
    // blocks), as the AVX-512 kernel does: otherwise the correction is exactly 1, and the
    // horizontal maximum and the scalar exp are skipped. The same bits as reducing every block:
    // the sum stays one float per head, added to block by block in the same order (a lane-wise
    // sum, as AVX-512 keeps, rounds differently when the same positions sit in other lanes, and
    // a session's scores would then depend on how its candidates were laid out).
    const __m256 block = _mm256_max_ps(sc_lo, sc_hi);
    if (_mm256_movemask_ps(_mm256_cmp_ps(block, _mm256_set1_ps(st.run_max[hh]), _CMP_GT_OQ)) != 0) {
      const float block_max = HorizontalMax(block);
      const __m256 vc = _mm256_set1_ps(expf(st.run_max[hh] - block_max));
      st.run_sum[hh] *= _mm256_cvtss_f32(vc);
      st.run_max[hh] = block_max;
      float* a = st.acc + hh * hd;
      for (int32_t c = 0; c < hd; c += 8)
        _mm256_storeu_ps(a + c, _mm256_mul_ps(_mm256_loadu_ps(a + c), vc));
    }
    const __m256 vmax = _mm256_set1_ps(st.run_max[hh]);
    const __m256 p_lo = _mm256_and_ps(flo, Exp(_mm256_sub_ps(sc_lo, vmax)));
    const __m256 p_hi = _mm256_and_ps(fhi, Exp(_mm256_sub_ps(sc_hi, vmax)));
    st.run_sum[hh] += HorizontalAdd(_mm256_add_ps(p_lo, p_hi));
    _mm256_storeu_ps(st.probs + hh * 16, _mm256_mul_ps(p_lo, vs_lo));
    _mm256_storeu_ps(st.probs + hh * 16 + 8, _mm256_mul_ps(p_hi, vs_hi));
  }
}

// acc[h][c0 .. c0 + 8 kCols) += sum_j probs[h][j] * V[16 b + j][same columns] for kHeads heads
// from h0, in registers.
template <KvType kType, int kHeads, int kCols>
void AccumulateV(const AttentionTask& task, int64_t b, int64_t valid, int32_t h0, int32_t c0,
                 const TokenState& st) {
  const int32_t hd = task.kv.head_dim;
  __m256 a[kHeads * kCols];
#pragma GCC unroll 16
  for (int h = 0; h < kHeads; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c)
      a[h * kCols + c] = _mm256_loadu_ps(st.acc + (h0 + h) * hd + c0 + 8 * c);
  for (int64_t j = 0; j < valid; ++j) {
    const KvElement<kType>* row =
        task.kv.ValueRow<const KvElement<kType>>(kKvBlockPositions * b + j);
    __m256 v[kCols];
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c) v[c] = LoadV8<kType>(row, c0 + 8 * c);
#pragma GCC unroll 16
    for (int h = 0; h < kHeads; ++h) {
      const __m256 p = _mm256_broadcast_ss(st.probs + (h0 + h) * 16 + j);
#pragma GCC unroll 16
      for (int c = 0; c < kCols; ++c) a[h * kCols + c] = _mm256_fmadd_ps(p, v[c], a[h * kCols + c]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < kHeads; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c)
      _mm256_storeu_ps(st.acc + (h0 + h) * hd + c0 + 8 * c, a[h * kCols + c]);
}

constexpr int kMaxVHeads = 3;  // with kCols = 4: 12 accumulator registers

template <KvType kType, int kCols>
void AccumulateVBlock(const AttentionTask& task, int64_t b, int64_t valid, const TokenState& st) {
  const int32_t hd = task.kv.head_dim;
  for (int32_t c0 = 0; c0 < hd; c0 += 8 * kCols) {
    for (int32_t h0 = 0; h0 < task.n_q_heads; h0 += kMaxVHeads) {
      const int32_t nh = task.n_q_heads - h0 < kMaxVHeads ? task.n_q_heads - h0 : kMaxVHeads;
      switch (nh) {
        case 1:
          AccumulateV<kType, 1, kCols>(task, b, valid, h0, c0, st);
          break;
        case 2:
          AccumulateV<kType, 2, kCols>(task, b, valid, h0, c0, st);
          break;
        default:
          AccumulateV<kType, 3, kCols>(task, b, valid, h0, c0, st);
          break;
      }
    }
  }
}

template <KvType kType>
void AttendToken(const AttentionTask& task, int64_t t, float* scratch) {
  const int32_t hd = task.kv.head_dim;
  const int32_t n_heads = task.n_q_heads;
  const int64_t n_pos = VisibleEnd(task, t);
  const int64_t n_blocks = (n_pos + 15) / 16;
  const float* q = task.q + t * task.ldq;
  TokenState st;
  st.acc = scratch;
  st.run_max = st.acc + n_heads * hd;
  st.run_sum = st.run_max + n_heads;
  st.probs = st.run_sum + n_heads;
  std::memset(st.acc, 0, sizeof(float) * static_cast<size_t>(n_heads * hd));
  for (int32_t h = 0; h < n_heads; ++h) {
    st.run_max[h] = -INFINITY;
    st.run_sum[h] = 0.0f;
  }
  // Score chunks of at most kMaxScoreHeads, balanced (7 heads: 4 + 3).
  const int32_t passes = (n_heads + kMaxScoreHeads - 1) / kMaxScoreHeads;
  const int32_t chunk = (n_heads + passes - 1) / passes;
  // The cache was evicted by the weights streamed since this layer's last step: fetch the blocks
  // ahead (K's block and its 16 V rows), so the loads below do not wait on memory line by line.
  constexpr int64_t kAhead = 2;
  const int64_t block_bytes = task.kv.BlockBytes();
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (b + kAhead < n_blocks) {
      const char* kn = task.kv.KeyBlock<const char>(b + kAhead);
      const char* vn = task.kv.ValueRow<const char>(kKvBlockPositions * (b + kAhead));
      for (int64_t off = 0; off < block_bytes; off += 64) {
        _mm_prefetch(kn + off, _MM_HINT_T0);
        _mm_prefetch(vn + off, _MM_HINT_T0);
      }
    }
    const uint32_t lanes = VisibleLanes(task, b, n_pos);
    if (lanes == 0) continue;  // hidden (tree attention)
    const int64_t valid = LanesExtent(lanes);
    for (int32_t h0 = 0; h0 < n_heads; h0 += chunk) {
      const int32_t nh = n_heads - h0 < chunk ? n_heads - h0 : chunk;
      switch (nh) {
        case 1:
          ScoreBlock<kType, 1>(task, q, b, lanes, h0, st);
          break;
        case 2:
          ScoreBlock<kType, 2>(task, q, b, lanes, h0, st);
          break;
        case 3:
          ScoreBlock<kType, 3>(task, q, b, lanes, h0, st);
          break;
        default:
          ScoreBlock<kType, 4>(task, q, b, lanes, h0, st);
          break;
      }
    }
    if (hd % 32 == 0) {
      AccumulateVBlock<kType, 4>(task, b, valid, st);
    } else if (hd % 16 == 0) {
      AccumulateVBlock<kType, 2>(task, b, valid, st);
    } else {
      AccumulateVBlock<kType, 1>(task, b, valid, st);
    }
  }
  float* out = task.out + t * task.ldo;
  for (int32_t h = 0; h < n_heads; ++h) {
    const __m256 inv = _mm256_set1_ps(1.0f / st.run_sum[h]);
    for (int32_t c = 0; c < hd; c += 8) {
      _mm256_storeu_ps(out + h * hd + c, _mm256_mul_ps(_mm256_loadu_ps(st.acc + h * hd + c), inv));
    }
  }
}

// One row of n values as int8 codes (q[i * stride]) and a scale, as the reference's StoreQ8Row.
void StoreQ8(const float* x, int32_t n, int8_t* q, int64_t stride, float* scale) {
  __m256 vmax = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int32_t i = 0; i < n; i += 8)
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(abs_mask, LoadN(x + i, n - i)));
  const float amax = HorizontalMax(vmax);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *scale = amax / 127.0f;
  const __m256 vinv = _mm256_set1_ps(inv);
  int32_t i = 0;
  if (stride == 1) {
    for (; i + 32 <= n; i += 32) {
      const __m256i v = PackToInt8(QuantizeLanes(_mm256_loadu_ps(x + i), vinv),
                                   QuantizeLanes(_mm256_loadu_ps(x + i + 8), vinv),
                                   QuantizeLanes(_mm256_loadu_ps(x + i + 16), vinv),
                                   QuantizeLanes(_mm256_loadu_ps(x + i + 24), vinv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), v);
    }
  }
  alignas(32) int32_t codes[8];
  for (; i < n; i += 8) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(codes), QuantizeLanes(LoadN(x + i, n - i), vinv));
    for (int32_t j = 0; j < 8 && i + j < n; ++j)
      q[(i + j) * stride] = static_cast<int8_t>(codes[j]);
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
    // Position p is lane p % 16 of K block p / 16 (KvHeadView::KeyRow).
    const int64_t block = p / kKvBlockPositions, lane = p % kKvBlockPositions;
    switch (kv.type) {
      case KvType::kF32: {
        float* kd = kv.KeyRow<float>(block, 0) + lane;
        for (int32_t d = 0; d < hd; ++d) kd[d * kKvBlockPositions] = kr[d];
        std::memcpy(kv.ValueRow<float>(p), vr, static_cast<size_t>(hd) * sizeof(float));
        break;
      }
      case KvType::kF16: {
        uint16_t* kd = kv.KeyRow<uint16_t>(block, 0) + lane;
        uint16_t* vd = kv.ValueRow<uint16_t>(p);
        for (int32_t d = 0; d < hd; d += 8) {
          alignas(16) uint16_t h[8];
          _mm_store_si128(reinterpret_cast<__m128i*>(h),
                          _mm256_cvtps_ph(LoadN(kr + d, hd - d), _MM_FROUND_TO_NEAREST_INT));
          for (int32_t j = 0; j < 8 && d + j < hd; ++j) kd[(d + j) * kKvBlockPositions] = h[j];
          const __m128i hv = _mm256_cvtps_ph(LoadN(vr + d, hd - d), _MM_FROUND_TO_NEAREST_INT);
          if (d + 8 <= hd) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(vd + d), hv);
          } else {
            _mm_store_si128(reinterpret_cast<__m128i*>(h), hv);
            std::memcpy(vd + d, h, static_cast<size_t>(hd - d) * 2);
          }
        }
        break;
      }
      case KvType::kQ8:
        StoreQ8(kr, hd, kv.KeyRow<int8_t>(block, 0) + lane, kKvBlockPositions, kv.KeyScale(p));
        StoreQ8(vr, hd, kv.ValueRow<int8_t>(p), 1, kv.ValueScale(p));
        break;
    }
  }
}

void Attention(const AttentionTask& task, float* scratch) {
  if (task.kv.head_dim % 8 != 0) {  // tiny or odd heads: the reference is fine
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

}  // namespace avx2
}  // namespace pocket
