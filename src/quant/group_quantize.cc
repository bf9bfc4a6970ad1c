#include "quant/group_quantize.h"

#include <algorithm>
#include <cmath>

#include "base/float16.h"

namespace pocket {
namespace {

float RoundFp16(float v) {
  return Fp16ToFloat(FloatToFp16(v));
}

// The code of x for (d, m) as stored (inv = 1 / d, or 0 when d is 0): round to nearest, clamped.
inline float CodeOf(float x, float m, float inv) {
  return std::clamp(std::nearbyint((x - m) * inv), 0.0f, 15.0f);
}

// The squared error of the group for (d, m): float arithmetic in a loop compilers vectorize (the
// search below evaluates some 80 candidates per group; this is the converter's inner loop).
float ErrorOf(const float* x, int32_t n, float d, float m) {
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  float err = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    const float e = d * CodeOf(x[i], m, inv) + m - x[i];
    err += e * e;
  }
  return err;
}

void AssignCodes(const float* x, int32_t n, float d, float m, uint8_t* codes) {
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  for (int32_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(CodeOf(x[i], m, inv));
}

}  // namespace

double QuantizeGroupU4(const float* x, int32_t n, uint8_t* codes, float* d_out, float* m_out) {
  float lo = x[0], hi = x[0];
  for (int32_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  float best = INFINITY;
  float best_d = 0.0f, best_m = lo;
  auto consider = [&](float d, float m) {
    d = RoundFp16(d);
    m = RoundFp16(m);
    if (!(d >= 0.0f) || !std::isfinite(d) || !std::isfinite(m)) return false;
    const float err = ErrorOf(x, n, d, m);
    if (!(err < best)) return false;
    best = err;
    best_d = d;
    best_m = m;
    return true;
  };
  if (hi == lo) {
    consider(0.0f, lo);
    AssignCodes(x, n, best_d, best_m, codes);
    *d_out = best_d;
    *m_out = best_m;
    return ErrorOf(x, n, best_d, best_m);
  }
  // Clipping search: shrink the range from either end, then refit (d, m) to the chosen codes by
  // least squares (the codes fixed, the error is quadratic in d and m) and re-assign.
  const float range = hi - lo;
  for (int a = 0; a <= 8; ++a) {
    for (int b = 0; b <= 8; ++b) {
      const float l = lo + range * 0.02f * a, h = hi - range * 0.02f * b;
      if (h <= l) continue;
      consider((h - l) / 15.0f, l);
    }
  }
  AssignCodes(x, n, best_d, best_m, codes);
  for (int iter = 0; iter < 3; ++iter) {
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    for (int32_t i = 0; i < n; ++i) {
      const double q = codes[i];
      sq += q;
      sx += x[i];
      sqq += q * q;
      sqx += q * x[i];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) break;
    const double d = (n * sqx - sq * sx) / det;
    const double m = (sx - d * sq) / n;
    if (d <= 0) break;
    if (!consider(static_cast<float>(d), static_cast<float>(m))) break;
    AssignCodes(x, n, best_d, best_m, codes);
  }
  *d_out = best_d;
  *m_out = best_m;
  return best;
}

double QuantizeGroupU8(const float* x, int32_t n, uint8_t* codes, float* d_out) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = RoundFp16(amax / 127.0f);
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  double err = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const int q = std::clamp(static_cast<int>(std::lround(x[i] * inv)), -127, 127);
    codes[i] = static_cast<uint8_t>(q + 128);
    const double e = static_cast<double>(d) * q - x[i];
    err += e * e;
  }
  *d_out = d;
  return err;
}

}  // namespace pocket
