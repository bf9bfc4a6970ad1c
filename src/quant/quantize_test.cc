#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/float16.h"
#include "base/rng.h"
#include "quant/blocks.h"

namespace pocket {
namespace {

std::vector<float> RandomRow(int64_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = (rng.NextFloat() * 2.0f - 1.0f) * scale;
  return v;
}

// Quantize then dequantize; the error of each element is bounded by the step of its block.
struct Case {
  DType type;
  float max_rel_error;  // relative to the row's max |x|
};

class RoundTripTest : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTripTest, ErrorWithinOneStep) {
  const Case c = GetParam();
  const int64_t n = 1024;
  std::vector<float> x = RandomRow(n, 1234, 3.0f);
  std::vector<uint8_t> q(RowBytes(c.type, n));
  QuantizeRow(c.type, x.data(), q.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  DequantizeRow(c.type, q.data(), y.data(), n);
  double max_err = 0;
  for (int64_t i = 0; i < n; ++i) max_err = std::max(max_err, double(std::fabs(x[i] - y[i])));
  EXPECT_LE(max_err, c.max_rel_error * 3.0) << DTypeName(c.type);
  EXPECT_GT(max_err, 0.0) << "quantization that loses nothing is suspicious for "
                          << DTypeName(c.type);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RoundTripTest,
                         ::testing::Values(Case{DType::kF16, 1e-3f}, Case{DType::kBF16, 4e-3f},
                                           Case{DType::kQ8_0, 1.0f / 127},
                                           Case{DType::kQ4_0, 1.0f / 8},
                                           Case{DType::kQ4_1, 1.0f / 15},
                                           Case{DType::kQ4_K, 1.0f / 12},
                                           Case{DType::kQ6_K, 1.0f / 30}),
                         [](const auto& p) { return std::string(DTypeName(p.param.type)); });

TEST(QuantTest, F32IsExact) {
  std::vector<float> x = RandomRow(64, 5, 1.0f);
  std::vector<uint8_t> q(RowBytes(DType::kF32, 64));
  QuantizeRow(DType::kF32, x.data(), q.data(), 64);
  std::vector<float> y(64);
  DequantizeRow(DType::kF32, q.data(), y.data(), 64);
  EXPECT_EQ(x, y);
}

// Hand-built blocks: the values the ggml layouts define.
TEST(QuantTest, Q4_0Layout) {
  BlockQ4_0 b{};
  b.d = FloatToFp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  DequantizeRow(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8));
  }
}

TEST(QuantTest, Q4_1Layout) {
  BlockQ4_1 b{};
  b.d = FloatToFp16(0.25f);
  b.m = FloatToFp16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (3 << 4));
  float y[32];
  DequantizeRow(DType::kQ4_1, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 0.25f * 3 - 1.0f);
  }
}

TEST(QuantTest, Q4_KLayout) {
  BlockQ4_K b{};
  b.d = FloatToFp16(0.5f);
  b.dmin = FloatToFp16(0.25f);
  // Sub-block j: scale j+1 (j < 4) or 40+j (j >= 4, needs the high bits), min 2*j (j<4) or 50+j.
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(j < 4 ? j + 1 : 40 + j);
    mn[j] = static_cast<uint8_t>(j < 4 ? 2 * j : 50 + j);
  }
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    Q4KScaleMin(b.scales, j, &s, &m);
    EXPECT_EQ(s, sc[j]);
    EXPECT_EQ(m, mn[j]);
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  float y[256];
  DequantizeRow(DType::kQ4_K, &b, y, 256);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const int i = chunk * 32 + l;
      const int s0 = 2 * chunk, s1 = 2 * chunk + 1;
      EXPECT_EQ(y[chunk * 64 + l], 0.5f * sc[s0] * (i % 16) - 0.25f * mn[s0]);
      EXPECT_EQ(y[chunk * 64 + 32 + l], 0.5f * sc[s1] * (15 - i % 16) - 0.25f * mn[s1]);
    }
  }
}

TEST(QuantTest, Q6_KLayout) {
  BlockQ6_K b{};
  b.d = FloatToFp16(0.125f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  // Element e gets the 6-bit code (e * 7) % 64, stored as the ggml layout prescribes.
  auto code = [](int e) { return (e * 7) % 64; };
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int base = half * 128;
      const int c0 = code(base + l), c1 = code(base + l + 32), c2 = code(base + l + 64),
                c3 = code(base + l + 96);
      b.ql[half * 64 + l] = static_cast<uint8_t>((c0 & 15) | ((c2 & 15) << 4));
      b.ql[half * 64 + l + 32] = static_cast<uint8_t>((c1 & 15) | ((c3 & 15) << 4));
      b.qh[half * 32 + l] =
          static_cast<uint8_t>((c0 >> 4) | ((c1 >> 4) << 2) | ((c2 >> 4) << 4) | ((c3 >> 4) << 6));
    }
  }
  float y[256];
  DequantizeRow(DType::kQ6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.125f * static_cast<float>(e / 16 - 8) * static_cast<float>(code(e) - 32))
        << "element " << e;
  }
}

TEST(QuantTest, ZeroRowsStayZero) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
    std::vector<float> x(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> q(RowBytes(t, 256));
    QuantizeRow(t, x.data(), q.data(), 256);
    DequantizeRow(t, q.data(), y.data(), 256);
    for (float v : y) EXPECT_EQ(v, 0.0f) << DTypeName(t);
  }
}

TEST(QuantTest, ParseNames) {
  DType t;
  ASSERT_TRUE(ParseDType("q4_k", &t));
  EXPECT_EQ(t, DType::kQ4_K);
  EXPECT_FALSE(ParseDType("q5_k", &t));
  EXPECT_DOUBLE_EQ(BitsPerWeight(DType::kQ4_0), 4.5);
  EXPECT_DOUBLE_EQ(BitsPerWeight(DType::kQ6_K), 6.5625);
}

}  // namespace
}  // namespace pocket
