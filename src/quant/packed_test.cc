#include "quant/packed.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/rng.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

TEST(PackedTest, CodesAndScalesRoundTrip) {
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    for (int32_t group : {32, 64, 128}) {
      for (bool explicit_min : {true, false}) {
        PackedLayout l{codes, group, 37, 256, explicit_min};  // 37 rows: the last panel is padded
        ASSERT_TRUE(l.Validate().ok());
        Rng rng(group);
        const int max_code = codes == PackedCodes::kU4 ? 15 : 255;
        std::vector<uint8_t> c(static_cast<size_t>(l.rows * l.cols));
        for (uint8_t& v : c) v = static_cast<uint8_t>(rng.NextBelow(max_code + 1));
        std::vector<float> d(static_cast<size_t>(l.rows * l.n_groups())), m(d.size());
        for (size_t i = 0; i < d.size(); ++i) {
          d[i] = 0.5f + static_cast<float>(i % 7);  // exactly representable in fp16
          m[i] = -static_cast<float>(i % 5);
        }
        std::vector<uint8_t> packed(l.total_bytes());
        PackCodes(l, c.data(), d.data(), m.data(), packed.data());
        PackedMatrix w{l, packed.data()};
        for (int64_t r = 0; r < l.rows; ++r) {
          for (int64_t k = 0; k < l.cols; ++k) {
            int code;
            float dd, mm;
            PackedWeight(w, r, k, &code, &dd, &mm);
            ASSERT_EQ(code, c[static_cast<size_t>(r * l.cols + k)]) << r << "," << k;
            ASSERT_EQ(dd, d[static_cast<size_t>(r * l.n_groups() + k / group)]);
            ASSERT_EQ(mm, explicit_min ? m[static_cast<size_t>(r * l.n_groups() + k / group)]
                                       : -static_cast<float>(l.zero_point()) * dd);
          }
        }
      }
    }
  }
}

TEST(PackedTest, LayoutOfOneQuad) {
  // Group 32, u4: vector i (i < 4) holds quad i in low nibbles and quad i + 4 in high nibbles.
  PackedLayout l{PackedCodes::kU4, 32, 16, 32};
  std::vector<uint8_t> c(16 * 32, 0);
  c[5 * 32 + 17] = 9;  // row 5, column 17: quad 4 (high nibbles of vector 0), byte 5*4 + 1
  std::vector<float> d(16, 1.0f), m(16, 0.0f);
  std::vector<uint8_t> packed(l.total_bytes());
  PackCodes(l, c.data(), d.data(), m.data(), packed.data());
  EXPECT_EQ(packed[5 * 4 + 1], 9 << 4);
  EXPECT_EQ(l.group_bytes(), 256u + 64u);
  EXPECT_DOUBLE_EQ(PackedLayout({PackedCodes::kU4, 64, 16, 64}).bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(PackedLayout({PackedCodes::kU4, 32, 16, 64, false}).bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(PackedLayout({PackedCodes::kU8, 32, 16, 64, false}).bits_per_weight(), 8.5);
}

TEST(PackedTest, GgufRepackIsExact) {
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
    const int64_t rows = 40, cols = 96;
    Rng rng(7);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (float& v : x) v = rng.NextFloat() * 2.0f - 1.0f;
    const size_t row_bytes = RowBytes(type, cols);
    std::vector<uint8_t> gguf(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(type, &x[static_cast<size_t>(r * cols)], &gguf[r * row_bytes], cols);
    }
    PackedLayout l;
    ASSERT_TRUE(PackedLayoutForGguf(type, rows, cols, &l));
    std::vector<uint8_t> packed(l.total_bytes());
    ASSERT_TRUE(RepackGgufRows(type, gguf.data(), l, packed.data()).ok());
    PackedMatrix w{l, packed.data()};
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, &gguf[r * row_bytes], a.data(), cols);
      DequantizePackedRow(w, r, b.data());
      ASSERT_EQ(a, b) << DTypeName(type) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace pocket
