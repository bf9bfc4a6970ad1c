#include "quant/quantize.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "base/float16.h"
#include "quant/blocks.h"

namespace pocket {
namespace {

int RoundToInt(float x) {
  return static_cast<int>(std::lround(x));
}

void DequantQ8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFloat(b[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void DequantQ4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFloat(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
      y[i * kQK + j + kQK / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void DequantQ4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFloat(b[i].d);
    const float m = Fp16ToFloat(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = d * static_cast<float>(b[i].qs[j] & 0x0f) + m;
      y[i * kQK + j + kQK / 2] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
    }
  }
}

void DequantQ4_K(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFloat(b[i].d);
    const float dmin = Fp16ToFloat(b[i].dmin);
    const uint8_t* q = b[i].qs;
    float* out = y + i * kQKK;
    for (int chunk = 0; chunk < 4; ++chunk) {  // 64 elements: sub-blocks 2*chunk and 2*chunk+1
      uint8_t sc0, m0, sc1, m1;
      Q4KScaleMin(b[i].scales, 2 * chunk, &sc0, &m0);
      Q4KScaleMin(b[i].scales, 2 * chunk + 1, &sc1, &m1);
      const float d0 = d * sc0, min0 = dmin * m0;
      const float d1 = d * sc1, min1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        out[chunk * 64 + l] = d0 * static_cast<float>(q[l] & 0x0f) - min0;
        out[chunk * 64 + 32 + l] = d1 * static_cast<float>(q[l] >> 4) - min1;
      }
      q += 32;
    }
  }
}

void DequantQ6_K(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFloat(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    float* out = y + i * kQKK;
    for (int half = 0; half < 2; ++half) {  // 128 elements each
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * sc[is] * static_cast<float>(q1);
        out[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        out[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        out[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
      out += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void QuantQ8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* v = x + i * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(RoundToInt(v[j] * id));
  }
}

void QuantQ4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* v = x + i * kQK;
    // The value of largest magnitude maps to -8, so the full range [-8, 7] is used.
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(v[j]) > amax) {
        amax = std::fabs(v[j]);
        vmax = v[j];
      }
    }
    const float d = vmax / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::clamp(RoundToInt(v[j] * id) + 8, 0, 15);
      const int q1 = std::clamp(RoundToInt(v[j + kQK / 2] * id) + 8, 0, 15);
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantQ4_1(const float* x, BlockQ4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* v = x + i * kQK;
    float lo = v[0], hi = v[0];
    for (int j = 1; j < kQK; ++j) {
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
    }
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    b[i].m = FloatToFp16(lo);
    const float m = Fp16ToFloat(b[i].m);  // quantize against the stored (rounded) minimum
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::clamp(RoundToInt((v[j] - m) * id), 0, 15);
      const int q1 = std::clamp(RoundToInt((v[j + kQK / 2] - m) * id), 0, 15);
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

}  // namespace

void QuantizeRowQ4_1OnGrid(const float* x, void* dst, int64_t n, int32_t grid) {
  assert(grid % kQK == 0 && n % grid == 0);
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t g = 0; g < n / grid; ++g) {
    const float* v = x + g * grid;
    float lo = v[0], hi = v[0];
    for (int32_t j = 1; j < grid; ++j) {
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
    }
    lo = std::min(lo, 0.0f);  // the grid holds zero exactly: z is an integer code
    hi = std::max(hi, 0.0f);
    const uint16_t d_bits = FloatToFp16((hi - lo) / 15.0f);
    const float d = Fp16ToFloat(d_bits);
    const int z = d > 0.0f ? std::clamp(RoundToInt(-lo / d), 0, 15) : 0;
    const uint16_t m_bits = FloatToFp16(-d * static_cast<float>(z));
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int32_t k = 0; k < grid / kQK; ++k) {
      BlockQ4_1& blk = b[g * (grid / kQK) + k];
      blk.d = d_bits;
      blk.m = m_bits;
      const float* w = v + k * kQK;
      for (int j = 0; j < kQK / 2; ++j) {
        const int q0 = std::clamp(RoundToInt(w[j] * id) + z, 0, 15);
        const int q1 = std::clamp(RoundToInt(w[j + kQK / 2] * id) + z, 0, 15);
        blk.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
    }
  }
}

namespace {

void PackQ4KScales(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
  }
}

void QuantQ4_K(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* v = x + i * kQKK;
    float scale[8], mins[8];  // w = scale * q - mins, q in [0, 15], mins >= 0
    float max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 8; ++s) {
      float lo = 0.0f, hi = v[s * 32];
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, v[s * 32 + l]);
        hi = std::max(hi, v[s * 32 + l]);
      }
      scale[s] = (hi - lo) / 15.0f;
      mins[s] = -lo;
      max_scale = std::max(max_scale, scale[s]);
      max_min = std::max(max_min, mins[s]);
    }
    const float d = max_scale / 63.0f;
    const float dmin = max_min / 63.0f;
    b[i].d = FloatToFp16(d);
    b[i].dmin = FloatToFp16(dmin);
    const float d_stored = Fp16ToFloat(b[i].d), dmin_stored = Fp16ToFloat(b[i].dmin);
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = static_cast<uint8_t>(d_stored > 0 ? std::clamp(RoundToInt(scale[s] / d_stored), 0, 63)
                                                : 0);
      mn[s] = static_cast<uint8_t>(
          dmin_stored > 0 ? std::clamp(RoundToInt(mins[s] / dmin_stored), 0, 63) : 0);
    }
    PackQ4KScales(sc, mn, b[i].scales);
    uint8_t q[kQKK];
    for (int s = 0; s < 8; ++s) {
      const float ds = d_stored * sc[s];
      const float ms = dmin_stored * mn[s];
      for (int l = 0; l < 32; ++l) {
        const float val = v[s * 32 + l];
        q[s * 32 + l] =
            static_cast<uint8_t>(ds > 0 ? std::clamp(RoundToInt((val + ms) / ds), 0, 15) : 0);
      }
    }
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int l = 0; l < 32; ++l) {
        b[i].qs[chunk * 32 + l] =
            static_cast<uint8_t>(q[chunk * 64 + l] | (q[chunk * 64 + 32 + l] << 4));
      }
    }
  }
}

void QuantQ6_K(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* v = x + i * kQKK;
    float scale[16];  // per 16 elements: w = scale * q, q in [-32, 31]
    float max_abs_scale = 0.0f;
    for (int s = 0; s < 16; ++s) {
      float amax = 0.0f, vmax = 0.0f;
      for (int l = 0; l < 16; ++l) {
        if (std::fabs(v[s * 16 + l]) > amax) {
          amax = std::fabs(v[s * 16 + l]);
          vmax = v[s * 16 + l];
        }
      }
      scale[s] = vmax / -32.0f;
      max_abs_scale = std::max(max_abs_scale, std::fabs(scale[s]));
    }
    const float d = max_abs_scale / 127.0f;
    b[i].d = FloatToFp16(d);
    const float d_stored = Fp16ToFloat(b[i].d);
    int8_t sc[16];
    for (int s = 0; s < 16; ++s) {
      sc[s] = static_cast<int8_t>(
          d_stored > 0 ? std::clamp(RoundToInt(scale[s] / d_stored), -128, 127) : 0);
      b[i].scales[s] = sc[s];
    }
    uint8_t q[kQKK];  // biased by 32: [0, 63]
    for (int s = 0; s < 16; ++s) {
      const float ds = d_stored * sc[s];
      for (int l = 0; l < 16; ++l) {
        const int qi = ds != 0 ? std::clamp(RoundToInt(v[s * 16 + l] / ds), -32, 31) : 0;
        q[s * 16 + l] = static_cast<uint8_t>(qi + 32);
      }
    }
    std::memset(b[i].ql, 0, sizeof(b[i].ql));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int half = 0; half < 2; ++half) {
      uint8_t* ql = b[i].ql + half * 64;
      uint8_t* qh = b[i].qh + half * 32;
      const uint8_t* qq = q + half * 128;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 0x0f) | ((qq[l + 64] & 0x0f) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0x0f) | ((qq[l + 96] & 0x0f) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                     ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void Q4KScaleMin(const uint8_t* scales, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  assert(IsBlockAligned(type, n));
  const int64_t nb = n / Traits(type).block_elems;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(h[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(h[i]);
      return;
    }
    case DType::kQ8_0:
      DequantQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
      return;
    case DType::kQ4_0:
      DequantQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
      return;
    case DType::kQ4_1:
      DequantQ4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
      return;
    case DType::kQ4_K:
      DequantQ4_K(static_cast<const BlockQ4_K*>(src), dst, nb);
      return;
    case DType::kQ6_K:
      DequantQ6_K(static_cast<const BlockQ6_K*>(src), dst, nb);
      return;
    case DType::kCount:
      break;
  }
  assert(false && "unknown dtype");
}

void QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  assert(IsBlockAligned(type, n));
  const int64_t nb = n / Traits(type).block_elems;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToFp16(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToBf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      QuantQ8_0(src, static_cast<BlockQ8_0*>(dst), nb);
      return;
    case DType::kQ4_0:
      QuantQ4_0(src, static_cast<BlockQ4_0*>(dst), nb);
      return;
    case DType::kQ4_1:
      QuantQ4_1(src, static_cast<BlockQ4_1*>(dst), nb);
      return;
    case DType::kQ4_K:
      QuantQ4_K(src, static_cast<BlockQ4_K*>(dst), nb);
      return;
    case DType::kQ6_K:
      QuantQ6_K(src, static_cast<BlockQ6_K*>(dst), nb);
      return;
    case DType::kCount:
      break;
  }
  assert(false && "unknown dtype");
}

}  // namespace pocket
