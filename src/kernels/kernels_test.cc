#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"
#include "kernels/kernel_table.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

// The reference kernels against definitions written out longhand in double precision.
TEST(ReferenceKernelsTest, MatmulMatchesDoubleForEveryType) {
  const KernelTable& k = ReferenceKernels();
  const int64_t rows = 8, cols = 256, n_tokens = 3;
  Rng rng(3);
  std::vector<float> wf(rows * cols), x(n_tokens * cols);
  for (float& v : wf) v = rng.NextFloat() - 0.5f;
  for (float& v : x) v = rng.NextFloat() - 0.5f;
  for (int ti = 0; ti < static_cast<int>(DType::kCount); ++ti) {
    const DType type = static_cast<DType>(ti);
    std::vector<uint8_t> wq(RowBytes(type, cols) * rows);
    for (int64_t r = 0; r < rows; ++r)
      QuantizeRow(type, &wf[r * cols], wq.data() + r * RowBytes(type, cols), cols);
    WeightMatrix w{type, rows, cols, wq.data(), RowBytes(type, cols)};
    std::vector<float> y(n_tokens * rows, NAN), scratch(cols);
    k.matmul(w, x.data(), n_tokens, y.data(), 0, rows, scratch.data());
    std::vector<float> deq(cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, w.row(r), deq.data(), cols);
      for (int64_t t = 0; t < n_tokens; ++t) {
        double want = 0;
        for (int64_t c = 0; c < cols; ++c) want += double(deq[c]) * x[t * cols + c];
        EXPECT_NEAR(y[t * rows + r], want, 1e-5) << DTypeName(type) << " r=" << r << " t=" << t;
      }
    }
  }
}

TEST(ReferenceKernelsTest, MatmulWritesOnlyItsRows) {
  const KernelTable& k = ReferenceKernels();
  std::vector<float> wf(4 * 32, 1.0f), x(32, 1.0f), y(4, -7.0f), scratch(32);
  WeightMatrix w{DType::kF32, 4, 32, reinterpret_cast<const uint8_t*>(wf.data()), 32 * 4};
  k.matmul(w, x.data(), 1, y.data(), 1, 3, scratch.data());
  EXPECT_EQ(y[0], -7.0f);
  EXPECT_EQ(y[1], 32.0f);
  EXPECT_EQ(y[2], 32.0f);
  EXPECT_EQ(y[3], -7.0f);
}

TEST(ReferenceKernelsTest, RmsnormRopeSiluAttention) {
  const KernelTable& k = ReferenceKernels();
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 0.5f}, y(4);
  k.rmsnorm(x.data(), w.data(), 1e-6f, 4, y.data());
  const double inv = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] * inv * w[i], 1e-6);

  // Rotate-half on one head of 4: pairs (0,2), (1,3); interleaved: (0,1), (2,3).
  const float cs[2] = {0.0f, 1.0f}, sn[2] = {1.0f, 0.0f};  // pair 0 rotated by 90 degrees
  std::vector<float> h = {1, 2, 3, 4};
  k.rope(h.data(), 1, 4, cs, sn, /*interleaved=*/false);
  EXPECT_EQ(h, (std::vector<float>{-3, 2, 1, 4}));
  h = {1, 2, 3, 4};
  k.rope(h.data(), 1, 4, cs, sn, /*interleaved=*/true);
  EXPECT_EQ(h, (std::vector<float>{-2, 1, 3, 4}));

  float g[2] = {0.0f, 2.0f}, u[2] = {3.0f, 1.0f}, o[2];
  k.silu_mul(g, u, 2, o);
  EXPECT_FLOAT_EQ(o[0], 0.0f);
  EXPECT_NEAR(o[1], 2.0 / (1.0 + std::exp(-2.0)), 1e-6);

  // Two positions, equal scores: output is the mean of the values.
  float q[2] = {1, 0}, kk[4] = {1, 0, 1, 0}, v[4] = {2, 4, 6, 8}, scores[2], out[2];
  k.attention_head(q, kk, v, 2, 2, 2, 1.0f, scores, out);
  EXPECT_NEAR(out[0], 4.0f, 1e-6);
  EXPECT_NEAR(out[1], 6.0f, 1e-6);
}

}  // namespace
}  // namespace pocket
