// AVX-512 attention over the KV cache, and writing keys and values into it. Compiled with
// AVX-512 flags; called only when the CPU has them.
//
// Scores come 16 positions at a time from K's transposed blocks, with each K row loaded once for
// all query heads of the KV head (grouped-query attention shares the loads). The softmax is the
// online (running maximum) form, so a query never needs all its scores in memory at once, and
// the value rows are accumulated into registers a few heads at a time.
#include <immintrin.h>

#include <math.h>  // expf: std::exp would leave a weak AVX-512 copy in debug builds
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/x86/avx512_common.h"

namespace pocket {
namespace avx512 {
namespace {

// One K row of a block (16 positions: KvHeadView::KeyRow) as floats; for kQ8 the per-position
// scales are applied to the scores instead.
template <KvType kType>
inline __m512 LoadKRow(const KvElement<kType>* k) {
  if constexpr (kType == KvType::kF32) {
    return _mm512_loadu_ps(k);
  } else if constexpr (kType == KvType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k)));
  } else {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k))));
  }
}

// 16 values of a V row (KvHeadView::ValueRow) from column c, as floats (kQ8: unscaled codes).
template <KvType kType>
inline __m512 LoadV16(const KvElement<kType>* v, int64_t c) {
  if constexpr (kType == KvType::kF32) {
    return _mm512_loadu_ps(v + c);
  } else if constexpr (kType == KvType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c)));
  } else {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + c))));
  }
}

constexpr int kMaxHeadChunk = 8;  // query heads whose scores are computed together

// Scores of NH heads against one K block already in floats (kf: [hd][16]): s[h] = q_h . K.
// The head count is a template parameter so the accumulators stay in registers.
template <int NH>
inline void BlockScores(const float* q, int32_t hd, const float* kf, __m512* s) {
  // Local accumulators: written through `s` inside the loop, the compiler (not knowing `s` does
  // not alias q or kf) would store every one of them at every step.
  __m512 a[NH];
  for (int h = 0; h < NH; ++h) a[h] = _mm512_setzero_ps();
  for (int32_t d = 0; d < hd; ++d) {
    __m512 kd = _mm512_loadu_ps(kf + 16 * d);
    // Keep the K row in a register: left to itself the compiler re-reads it from memory for every
    // head, doubling the loads of this load-bound loop.
    __asm__("" : "+v"(kd));
    for (int h = 0; h < NH; ++h) a[h] = _mm512_fmadd_ps(kd, _mm512_set1_ps(q[h * hd + d]), a[h]);
  }
  for (int h = 0; h < NH; ++h) s[h] = a[h];
}

inline void BlockScoresN(int32_t nh, const float* q, int32_t hd, const float* kf, __m512* s) {
  switch (nh) {
    case 1:
      BlockScores<1>(q, hd, kf, s);
      break;
    case 2:
      BlockScores<2>(q, hd, kf, s);
      break;
    case 3:
      BlockScores<3>(q, hd, kf, s);
      break;
    case 4:
      BlockScores<4>(q, hd, kf, s);
      break;
    case 5:
      BlockScores<5>(q, hd, kf, s);
      break;
    case 6:
      BlockScores<6>(q, hd, kf, s);
      break;
    case 7:
      BlockScores<7>(q, hd, kf, s);
      break;
    default:
      BlockScores<8>(q, hd, kf, s);
      break;
  }
}

// acc[h] (NH heads of NC * 16 floats, head stride hd) += sum_j probs[h][j] * V row j (vf: rows of
// hd floats), accumulators in registers.
template <int NC, int NH>
inline void AccumulateValues(float* acc, int32_t hd, const float* probs, const float* vf,
                             int64_t valid) {
  __m512 a[NH][NC];
  for (int h = 0; h < NH; ++h)
    for (int c = 0; c < NC; ++c) a[h][c] = _mm512_loadu_ps(acc + h * hd + 16 * c);
  for (int64_t j = 0; j < valid; ++j) {
    for (int c = 0; c < NC; ++c) {
      const __m512 v = _mm512_loadu_ps(vf + j * hd + 16 * c);
      for (int h = 0; h < NH; ++h)
        a[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(probs[h * 16 + j]), v, a[h][c]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(acc + h * hd + 16 * c, a[h][c]);
}

// All n_heads heads, in register-sized chunks; head dims other than 64 and 128 take a plain loop.
inline void AccumulateValuesAll(float* acc, int32_t n_heads, int32_t hd, const float* probs,
                                const float* vf, int64_t valid) {
  int32_t h0 = 0;
  if (hd == 64) {
    for (; h0 + 4 <= n_heads; h0 += 4)
      AccumulateValues<4, 4>(acc + h0 * hd, hd, probs + h0 * 16, vf, valid);
    // The rest together: fewer than 4 heads alone would leave too few independent chains.
    switch (n_heads - h0) {
      case 3:
        AccumulateValues<4, 3>(acc + h0 * hd, hd, probs + h0 * 16, vf, valid);
        break;
      case 2:
        AccumulateValues<4, 2>(acc + h0 * hd, hd, probs + h0 * 16, vf, valid);
        break;
      case 1:
        AccumulateValues<4, 1>(acc + h0 * hd, hd, probs + h0 * 16, vf, valid);
        break;
      default:
        break;
    }
    return;
  }
  if (hd == 128) {
    for (; h0 + 2 <= n_heads; h0 += 2)
      AccumulateValues<8, 2>(acc + h0 * hd, hd, probs + h0 * 16, vf, valid);
    for (; h0 < n_heads; ++h0)
      AccumulateValues<8, 1>(acc + h0 * hd, hd, probs + h0 * 16, vf, valid);
    return;
  }
  for (; h0 < n_heads; ++h0) {
    for (int64_t j = 0; j < valid; ++j) {
      const __m512 p = _mm512_set1_ps(probs[h0 * 16 + j]);
      for (int32_t c = 0; c < hd; c += 16) {
        _mm512_storeu_ps(acc + h0 * hd + c, _mm512_fmadd_ps(p, _mm512_loadu_ps(vf + j * hd + c),
                                                            _mm512_loadu_ps(acc + h0 * hd + c)));
      }
    }
  }
}

// The query tokens of a task (one for decode, up to 16 in prefill): each key block's K and V are
// converted to floats once for all of them; per token and head, an online softmax with a lane-wise
// running sum (reduced once at the end) and an exp for the correction only when the running maximum
// grows.
template <KvType kType>
void AttendTokens(const AttentionTask& task, float* scratch) {
  // A local copy of the view: the vector stores below cannot alias it, so its fields stay in
  // registers; its type is kType (the dispatch below), which folds the accessors' element size.
  KvHeadView kv = task.kv;
  kv.type = kType;
  const int32_t hd = kv.head_dim;
  const int32_t n_heads = task.n_q_heads;
  const int64_t nt = task.t_end - task.t_begin;
  const int32_t nc = hd / 16;
  // scratch: acc [nt][heads][hd], lsum [nt][heads][16], probs [nt][heads][16], kf [hd][16],
  // vf [16][hd], run_max [nt][heads].
  float* acc = scratch;
  float* lsum = acc + nt * n_heads * hd;
  float* probs = lsum + nt * n_heads * 16;
  float* kf = probs + nt * n_heads * 16;
  float* vf = kf + hd * 16;
  float* run_max = vf + 16 * hd;
  for (int64_t i = 0; i < nt * n_heads * hd; ++i) acc[i] = 0.0f;
  for (int64_t i = 0; i < nt * n_heads * 16; ++i) lsum[i] = 0.0f;
  for (int64_t i = 0; i < nt * n_heads; ++i) run_max[i] = -INFINITY;
  const int64_t last_pos = VisibleEnd(task, task.t_end - 1) - 1;
  const __m512 vscale = _mm512_set1_ps(task.scale);
  // Keys and values of a block: bytes (K's block, or its 16 V rows), and the distance the
  // prefetches run ahead.
  using Elem = KvElement<kType>;
  constexpr int64_t kAhead = 2;
  const int64_t block_bytes = kv.BlockBytes();
  for (int64_t b = 0; b <= last_pos / 16; ++b) {
    // The cache was evicted by the weights streamed since this layer's last step: fetch the
    // blocks ahead, so the loads below do not wait on memory one line at a time.
    if (b + kAhead <= last_pos / 16) {
      const char* kn = kv.KeyBlock<const char>(b + kAhead);
      const char* vn = kv.ValueRow<const char>(kKvBlockPositions * (b + kAhead));
      for (int64_t off = 0; off < block_bytes; off += 64) {
        _mm_prefetch(kn + off, _MM_HINT_T0);
        _mm_prefetch(vn + off, _MM_HINT_T0);
      }
    }
    // Rows to load: up to the last position any of the task's tokens sees in this block.
    uint32_t block_lanes = 0;
    for (int64_t ti = 0; ti < nt; ++ti) {
      block_lanes |= VisibleLanes(task, b, VisibleEnd(task, task.t_begin + ti));
    }
    if (block_lanes == 0) continue;  // hidden from every token (tree attention)
    const int64_t block_valid = LanesExtent(block_lanes);
    // The block's keys [hd][16] and value rows [16][hd] as floats: an f32 cache holds them so
    // already (a block's V rows are consecutive), others are converted into kf / vf.
    const float* kblock = kf;
    const float* vblock = vf;
    if constexpr (kType == KvType::kF32) {
      kblock = kv.KeyBlock<const float>(b);
      vblock = kv.ValueRow<const float>(kKvBlockPositions * b);
    } else {
      const Elem* kb = kv.KeyBlock<const Elem>(b);
      for (int32_t d = 0; d < hd; ++d) {
        _mm512_storeu_ps(kf + 16 * d, LoadKRow<kType>(kb + d * kKvBlockPositions));
      }
      for (int64_t j = 0; j < block_valid; ++j) {
        const Elem* row = kv.ValueRow<const Elem>(kKvBlockPositions * b + j);
        for (int32_t c = 0; c < nc; ++c)
          _mm512_storeu_ps(vf + j * hd + 16 * c, LoadV16<kType>(row, 16 * c));
      }
    }
    __m512 kscale = vscale, vscales = _mm512_set1_ps(1.0f);
    if constexpr (kType == KvType::kQ8) {
      kscale = _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(MaskFor(block_valid), kv.KeyScales(b)));
      vscales = _mm512_maskz_loadu_ps(MaskFor(block_valid), kv.ValueScales(b));
    }
    for (int64_t ti = 0; ti < nt; ++ti) {
      const int64_t n_pos = VisibleEnd(task, task.t_begin + ti);
      // Causal (a block in the token's future) or hidden (tree attention): nothing to see.
      const uint32_t lanes = VisibleLanes(task, b, n_pos);
      if (lanes == 0) continue;
      const int64_t valid = LanesExtent(lanes);
      const __mmask16 mask = static_cast<__mmask16>(lanes);
      const float* q = task.q + (task.t_begin + ti) * task.ldq;
      for (int32_t h0 = 0; h0 < n_heads; h0 += kMaxHeadChunk) {
        const int32_t nh = n_heads - h0 < kMaxHeadChunk ? n_heads - h0 : kMaxHeadChunk;
        __m512 s[kMaxHeadChunk];
        BlockScoresN(nh, q + h0 * hd, hd, kblock, s);
        for (int32_t h = 0; h < nh; ++h) {
          const int64_t th = ti * n_heads + h0 + h;
          const __m512 sc =
              _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), mask, _mm512_mul_ps(s[h], kscale));
          // The maximum is only reduced when some score passes the running one (rare after the
          // first blocks); otherwise nothing changes.
          if (_mm512_cmp_ps_mask(sc, _mm512_set1_ps(run_max[th]), _CMP_GT_OQ) != 0) {
            const float block_max = _mm512_reduce_max_ps(sc);
            const float correction = expf(run_max[th] - block_max);
            run_max[th] = block_max;
            const __m512 vc = _mm512_set1_ps(correction);
            _mm512_storeu_ps(lsum + th * 16, _mm512_mul_ps(_mm512_loadu_ps(lsum + th * 16), vc));
            for (int32_t c = 0; c < nc; ++c) {
              _mm512_storeu_ps(acc + th * hd + 16 * c,
                               _mm512_mul_ps(_mm512_loadu_ps(acc + th * hd + 16 * c), vc));
            }
          }
          const __m512 pr =
              _mm512_maskz_mov_ps(mask, Exp(_mm512_sub_ps(sc, _mm512_set1_ps(run_max[th]))));
          _mm512_storeu_ps(lsum + th * 16, _mm512_add_ps(_mm512_loadu_ps(lsum + th * 16), pr));
          _mm512_storeu_ps(probs + th * 16, kType == KvType::kQ8 ? _mm512_mul_ps(pr, vscales) : pr);
        }
      }
      // acc[token][h] += sum_j probs[j] * V[j].
      AccumulateValuesAll(acc + ti * n_heads * hd, n_heads, hd, probs + ti * n_heads * 16, vblock,
                          valid);
    }
  }
  for (int64_t ti = 0; ti < nt; ++ti) {
    float* out = task.out + (task.t_begin + ti) * task.ldo;
    for (int32_t h = 0; h < n_heads; ++h) {
      const int64_t th = ti * n_heads + h;
      const __m512 inv =
          _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(lsum + th * 16)));
      for (int32_t c = 0; c < nc; ++c) {
        _mm512_storeu_ps(out + h * hd + 16 * c,
                         _mm512_mul_ps(_mm512_loadu_ps(acc + th * hd + 16 * c), inv));
      }
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
        for (int32_t d = 0; d < hd; d += 16) {
          const __mmask16 m = MaskFor(hd - d);
          alignas(32) uint16_t h[16];
          _mm256_store_si256(
              reinterpret_cast<__m256i*>(h),
              _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, kr + d), _MM_FROUND_TO_NEAREST_INT));
          for (int32_t j = 0; j < 16 && d + j < hd; ++j) kd[(d + j) * kKvBlockPositions] = h[j];
          _mm256_mask_storeu_epi16(
              vd + d, m,
              _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, vr + d), _MM_FROUND_TO_NEAREST_INT));
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
  if (task.kv.head_dim % 16 != 0) {  // tiny heads (stories260K: 8): the reference is fine
    reference::Attention(task, scratch);
    return;
  }
  // Tasks hold at most 16 tokens (the scratch is sized for that); longer ones go in pieces.
  for (int64_t t0 = task.t_begin; t0 < task.t_end; t0 += 16) {
    AttentionTask part = task;
    part.t_begin = t0;
    part.t_end = task.t_end - t0 < 16 ? task.t_end : t0 + 16;
    switch (task.kv.type) {
      case KvType::kF32:
        AttendTokens<KvType::kF32>(part, scratch);
        break;
      case KvType::kF16:
        AttendTokens<KvType::kF16>(part, scratch);
        break;
      case KvType::kQ8:
        AttendTokens<KvType::kQ8>(part, scratch);
        break;
    }
  }
}

}  // namespace avx512
}  // namespace pocket
