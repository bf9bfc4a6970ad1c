#include "quant/group_quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/float16.h"
#include "base/rng.h"

namespace pocket {
namespace {

// Plain min/max round-to-nearest (GGUF Q4_1's reference), with the same fp16 storage.
double MinMaxError(const std::vector<float>& x) {
  const float lo = *std::min_element(x.begin(), x.end());
  const float hi = *std::max_element(x.begin(), x.end());
  const float d = Fp16ToFloat(FloatToFp16((hi - lo) / 15.0f));
  const float m = Fp16ToFloat(FloatToFp16(lo));
  double err = 0;
  for (float v : x) {
    const float q = d > 0 ? std::clamp(std::nearbyint((v - m) / d), 0.0f, 15.0f) : 0.0f;
    err += (d * q + m - v) * (d * q + m - v);
  }
  return err;
}

TEST(GroupQuantizeTest, U4NeverWorseThanMinMaxAndConsistent) {
  Rng rng(7);
  for (int32_t n : {32, 64, 128}) {
    double total_searched = 0, total_minmax = 0;
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      // Gaussian-like weights with an occasional outlier, as trained matrices have.
      for (float& v : x) {  // sum of uniforms: roughly Gaussian
        v = (rng.NextFloat() + rng.NextFloat() + rng.NextFloat() - 1.5f) * 0.02f;
      }
      if (trial % 5 == 0) x[static_cast<size_t>(trial % n)] *= 8.0f;
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      float d = 0, m = 0;
      const double err = QuantizeGroupU4(x.data(), n, codes.data(), &d, &m);
      EXPECT_EQ(Fp16ToFloat(FloatToFp16(d)), d);
      EXPECT_EQ(Fp16ToFloat(FloatToFp16(m)), m);
      double recomputed = 0;
      for (int32_t i = 0; i < n; ++i) {
        ASSERT_LE(codes[static_cast<size_t>(i)], 15);
        const double e = d * codes[static_cast<size_t>(i)] + m - x[static_cast<size_t>(i)];
        recomputed += e * e;
      }
      EXPECT_NEAR(recomputed, err, 1e-6 * (1 + recomputed));
      const double minmax = MinMaxError(x);
      EXPECT_LE(recomputed, minmax * (1 + 1e-5)) << "n " << n << " trial " << trial;
      total_searched += recomputed;
      total_minmax += minmax;
    }
    // And clearly better on average.
    EXPECT_LT(total_searched, 0.9 * total_minmax) << n;
  }
}

TEST(GroupQuantizeTest, ConstantGroupIsExact) {
  std::vector<float> x(64, 0.25f);
  std::vector<uint8_t> codes(64);
  float d = 1, m = 0;
  EXPECT_EQ(QuantizeGroupU4(x.data(), 64, codes.data(), &d, &m), 0.0);
  EXPECT_EQ(m, 0.25f);
}

}  // namespace
}  // namespace pocket
