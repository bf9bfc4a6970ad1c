// NEON attention over the KV cache, and writing keys and values into it (baseline ARMv8; the
// dotprod and i8mm tables reuse these: their instructions add nothing to float attention).
//
// As the AVX-512 version: scores come 16 positions at a time from K's transposed blocks (four
// registers per K row), each K row loaded once for a few query heads of the KV head; the softmax
// is the online (running maximum) form; value rows are accumulated into registers.
#include <arm_neon.h>

#include <math.h>
#include <string.h>

#include <cstdint>

#include "kernels/arm/neon_common.h"
#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"

namespace pocket {
namespace arm {
namespace {

// Positions 4c..4c+3 of one K row of a block (16 positions: KvHeadView::KeyRow), as floats; kQ8:
// unscaled codes (the per-position scales are applied to the scores instead).
template <KvType kType>
inline void LoadKRow(const KvElement<kType>* p, float32x4_t* k) {
  if constexpr (kType == KvType::kF32) {
    for (int c = 0; c < 4; ++c) k[c] = vld1q_f32(p + 4 * c);
  } else if constexpr (kType == KvType::kF16) {
    for (int c = 0; c < 4; ++c) k[c] = LoadF16(p + 4 * c);
  } else {
    const int8x16_t q = vld1q_s8(p);
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    k[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    k[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    k[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    k[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
  }
}

// 4 values of a V row (KvHeadView::ValueRow) from column c, as floats (kQ8: unscaled codes).
template <KvType kType>
inline float32x4_t LoadV4(const KvElement<kType>* v, int64_t c) {
  if constexpr (kType == KvType::kF32) {
    return vld1q_f32(v + c);
  } else if constexpr (kType == KvType::kF16) {
    return LoadF16(v + c);
  } else {
    int32_t bits;
    memcpy(&bits, v + c, 4);
    const int8x8_t q = vreinterpret_s8_s32(vdup_n_s32(bits));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(q))));
  }
}

// 16 per-position values of the block starting at p0, lanes at or past `valid` zero (scale arrays
// may end with the cache).
inline void LoadBlock16(const float* p, int64_t valid, float32x4_t* v) {
  float tmp[16] = {};
  const float* src = p;
  if (valid < 16) {
    for (int64_t j = 0; j < valid; ++j) tmp[j] = p[j];
    src = tmp;
  }
  for (int c = 0; c < 4; ++c) v[c] = vld1q_f32(src + 4 * c);
}

struct Softmax {
  float* acc;      // [n_heads][hd]: unnormalized outputs
  float* run_max;  // [n_heads]
  float* run_sum;  // [n_heads]
  float* probs;    // [n_heads][16]: this block's weights (kQ8: times V's scales)
};

// Scores of kHeads query heads (from h0) for block b, folded into the online softmax.
template <KvType kType, int kHeads>
inline void ScoreBlock(const AttentionTask& task, const float* q, int64_t b, int64_t valid,
                       uint32_t lanes, int32_t h0, const Softmax& sm) {
  const int32_t hd = task.kv.head_dim;
  float32x4_t s[kHeads][4];
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < 4; ++c) s[h][c] = vdupq_n_f32(0.0f);
  const KvElement<kType>* kb = task.kv.KeyBlock<const KvElement<kType>>(b);
  for (int32_t d = 0; d < hd; ++d) {
    float32x4_t k[4];
    LoadKRow<kType>(kb + d * kKvBlockPositions, k);
    for (int h = 0; h < kHeads; ++h) {
      const float qd = q[(h0 + h) * hd + d];
      for (int c = 0; c < 4; ++c) s[h][c] = vfmaq_n_f32(s[h][c], k[c], qd);
    }
  }
  float32x4_t kscale[4], vscale[4];
  for (int c = 0; c < 4; ++c) kscale[c] = vscale[c] = vdupq_n_f32(task.scale);
  if constexpr (kType == KvType::kQ8) {
    LoadBlock16(task.kv.KeyScales(b), valid, kscale);
    for (int c = 0; c < 4; ++c) kscale[c] = vmulq_f32(kscale[c], vdupq_n_f32(task.scale));
    LoadBlock16(task.kv.ValueScales(b), valid, vscale);
  }
  uint32x4_t in[4];  // visible positions (causal, not hidden)
  const uint32x4_t bit = {1, 2, 4, 8};
  for (int c = 0; c < 4; ++c) in[c] = vtstq_u32(vdupq_n_u32(lanes >> (4 * c)), bit);
  const float32x4_t neg_inf = vdupq_n_f32(-INFINITY), zero = vdupq_n_f32(0.0f);
  for (int h = 0; h < kHeads; ++h) {
    const int32_t hh = h0 + h;
    float32x4_t sc[4];
    float32x4_t mx = neg_inf;
    for (int c = 0; c < 4; ++c) {
      sc[c] = vbslq_f32(in[c], vmulq_f32(s[h][c], kscale[c]), neg_inf);
      mx = vmaxq_f32(mx, sc[c]);
    }
    const float block_max = vmaxvq_f32(mx);
    const float new_max = block_max > sm.run_max[hh] ? block_max : sm.run_max[hh];
    const float correction = expf(sm.run_max[hh] - new_max);
    const float32x4_t vmax = vdupq_n_f32(new_max);
    float32x4_t psum = zero;
    for (int c = 0; c < 4; ++c) {
      const float32x4_t p = vbslq_f32(in[c], Exp(vsubq_f32(sc[c], vmax)), zero);
      psum = vaddq_f32(psum, p);
      vst1q_f32(sm.probs + hh * 16 + 4 * c, kType == KvType::kQ8 ? vmulq_f32(p, vscale[c]) : p);
    }
    sm.run_sum[hh] = sm.run_sum[hh] * correction + vaddvq_f32(psum);
    sm.run_max[hh] = new_max;
    if (correction != 1.0f) {
      const float32x4_t vc = vdupq_n_f32(correction);
      float* acc = sm.acc + hh * hd;
      for (int32_t c = 0; c < hd; c += 4) vst1q_f32(acc + c, vmulq_f32(vld1q_f32(acc + c), vc));
    }
  }
}

// acc[h][c0, c0 + 4 kRegs) += sum_j probs[h][j] * V[16 b + j][...], for one head, in registers.
template <KvType kType, int kRegs>
inline void AccumulateValues(const AttentionTask& task, int64_t b, int64_t valid, int32_t h,
                             int32_t c0, const Softmax& sm) {
  const int32_t hd = task.kv.head_dim;
  float* acc = sm.acc + h * hd + c0;
  float32x4_t a[kRegs];
  for (int c = 0; c < kRegs; ++c) a[c] = vld1q_f32(acc + 4 * c);
  for (int64_t j = 0; j < valid; ++j) {
    const float p = sm.probs[h * 16 + j];
    const KvElement<kType>* row =
        task.kv.ValueRow<const KvElement<kType>>(kKvBlockPositions * b + j);
    for (int c = 0; c < kRegs; ++c) a[c] = vfmaq_n_f32(a[c], LoadV4<kType>(row, c0 + 4 * c), p);
  }
  for (int c = 0; c < kRegs; ++c) vst1q_f32(acc + 4 * c, a[c]);
}

template <KvType kType>
void AttendToken(const AttentionTask& task, int64_t t, float* scratch) {
  const int32_t hd = task.kv.head_dim;
  const int32_t n_heads = task.n_q_heads;
  const int64_t n_pos = VisibleEnd(task, t);
  const int64_t n_blocks = (n_pos + 15) / 16;
  const float* q = task.q + t * task.ldq;
  // scratch: acc [n_heads][hd], running max [n_heads], sum [n_heads], probs [n_heads][16].
  Softmax sm;
  sm.acc = scratch;
  sm.run_max = sm.acc + n_heads * hd;
  sm.run_sum = sm.run_max + n_heads;
  sm.probs = sm.run_sum + n_heads;
  for (int32_t i = 0; i < n_heads * hd; ++i) sm.acc[i] = 0.0f;
  for (int32_t h = 0; h < n_heads; ++h) {
    sm.run_max[h] = -INFINITY;
    sm.run_sum[h] = 0.0f;
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint32_t lanes = VisibleLanes(task, b, n_pos);
    if (lanes == 0) continue;  // hidden (tree attention)
    const int64_t valid = LanesExtent(lanes);
    int32_t h0 = 0;
    for (; h0 + 4 <= n_heads; h0 += 4) ScoreBlock<kType, 4>(task, q, b, valid, lanes, h0, sm);
    for (; h0 + 2 <= n_heads; h0 += 2) ScoreBlock<kType, 2>(task, q, b, valid, lanes, h0, sm);
    for (; h0 < n_heads; ++h0) ScoreBlock<kType, 1>(task, q, b, valid, lanes, h0, sm);
    for (int32_t h = 0; h < n_heads; ++h) {
      int32_t c0 = 0;
      for (; c0 + 64 <= hd; c0 += 64) AccumulateValues<kType, 16>(task, b, valid, h, c0, sm);
      for (; c0 < hd; c0 += 16) AccumulateValues<kType, 4>(task, b, valid, h, c0, sm);
    }
  }
  float* out = task.out + t * task.ldo;
  for (int32_t h = 0; h < n_heads; ++h) {
    const float32x4_t inv = vdupq_n_f32(1.0f / sm.run_sum[h]);
    for (int32_t c = 0; c < hd; c += 4)
      vst1q_f32(out + h * hd + c, vmulq_f32(vld1q_f32(sm.acc + h * hd + c), inv));
  }
}

// One row of n (a multiple of 4) values as int8 codes with one scale (round half to even, as
// the reference's nearbyint), codes written with the given stride.
void StoreQ8(const float* x, int32_t n, int8_t* q, int64_t stride, float* scale) {
  float32x4_t vmax = vdupq_n_f32(0.0f);
  for (int32_t i = 0; i < n; i += 4) vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(x + i)));
  const float amax = vmaxvq_f32(vmax);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *scale = amax / 127.0f;
  const float32x4_t vinv = vdupq_n_f32(inv);
  for (int32_t i = 0; i < n; i += 4) {
    int32x4_t qi = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + i), vinv));
    qi = vminq_s32(vmaxq_s32(qi, vdupq_n_s32(-127)), vdupq_n_s32(127));
    int32_t codes[4];
    vst1q_s32(codes, qi);
    for (int j = 0; j < 4; ++j) q[(i + j) * stride] = static_cast<int8_t>(codes[j]);
  }
}

}  // namespace

namespace neon {

void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv) {
  const int32_t hd = kv.head_dim;
  if (hd % 4 != 0) {
    reference::KvStore(kv, pos, n, k, ldk, v, ldv);
    return;
  }
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
        memcpy(kv.ValueRow<float>(p), vr, static_cast<size_t>(hd) * sizeof(float));
        break;
      }
      case KvType::kF16: {
        // FCVTN rounds to nearest even with overflow to infinity, as FloatToFp16.
        uint16_t* kd = kv.KeyRow<uint16_t>(block, 0) + lane;
        uint16_t* vd = kv.ValueRow<uint16_t>(p);
        for (int32_t d = 0; d < hd; d += 4) {
          uint16_t h[4];
          vst1_u16(h, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(kr + d))));
          for (int j = 0; j < 4; ++j) kd[(d + j) * kKvBlockPositions] = h[j];
          vst1_u16(vd + d, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(vr + d))));
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

}  // namespace neon
}  // namespace arm
}  // namespace pocket
