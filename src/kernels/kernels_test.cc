// Differential tests: every kernel table this CPU (or emulator) runs against the scalar reference.
// quantize_rows, packed_gemm (store / accumulate epilogues), dense_gemm, rmsnorm, rope and kv_store
// must be bit-identical; attention and SiLU (exp approximations) within a stated tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/float16.h"
#include "base/rng.h"
#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/select.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = (rng.NextFloat() * 2.0f - 1.0f) * scale;
  return v;
}

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<float> sum;
  QuantizedRows rows;
  Quantized(int64_t n_tokens, int64_t cols, int32_t group)
      : q(static_cast<size_t>(n_tokens * cols)),
        scale(static_cast<size_t>(n_tokens * cols / group)),
        sum(scale.size()) {
    rows = {q.data(), scale.data(), sum.data(), n_tokens, cols, group};
  }
};

// A random packed matrix with fp16-exact scales and some outlier rows.
struct RandomPacked {
  std::vector<uint8_t> bytes;
  PackedMatrix m;
  RandomPacked(PackedCodes codes, int32_t group, int64_t rows, int64_t cols, uint64_t seed,
               bool explicit_min = true) {
    PackedLayout l{codes, group, rows, cols, explicit_min};
    Rng rng(seed);
    const int max_code = codes == PackedCodes::kU4 ? 15 : 255;
    std::vector<uint8_t> c(static_cast<size_t>(rows * cols));
    for (uint8_t& v : c) v = static_cast<uint8_t>(rng.NextBelow(max_code + 1));
    std::vector<float> d(static_cast<size_t>(rows * l.n_groups())), mm(d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      d[i] = Fp16ToFloat(FloatToFp16(0.001f + rng.NextFloat() * 0.02f));
      mm[i] = Fp16ToFloat(FloatToFp16(-rng.NextFloat() * 0.1f));
    }
    bytes.resize(l.total_bytes());
    PackCodes(l, c.data(), d.data(), mm.data(), bytes.data());
    m = PackedMatrix{l, bytes.data()};
  }
};

class KernelsTest : public ::testing::TestWithParam<const KernelTable*> {};

TEST_P(KernelsTest, QuantizeRowsIsBitExact) {
  const KernelTable& k = *GetParam();
  for (int32_t group : {32, 64, 128}) {
    for (bool with_norm : {false, true}) {
      const int64_t n_tokens = 5, cols = 896 + (group == 128 ? 128 : 0), ldx = cols + 7;
      std::vector<float> x = Random(static_cast<size_t>(n_tokens * ldx), 11 + group, 3.0f);
      x[5] = 40.0f;                                                             // an outlier
      for (int64_t i = 0; i < 64; ++i) x[static_cast<size_t>(ldx + i)] = 0.0f;  // an all-zero group
      std::vector<float> w = Random(static_cast<size_t>(cols), 3);
      Quantized a(n_tokens, cols, group), b(n_tokens, cols, group);
      reference::QuantizeRows(x.data(), ldx, n_tokens, cols, with_norm ? w.data() : nullptr, 1e-6f,
                              &a.rows);
      k.quantize_rows(x.data(), ldx, n_tokens, cols, with_norm ? w.data() : nullptr, 1e-6f,
                      &b.rows);
      EXPECT_EQ(a.q, b.q) << k.name << " group " << group << " norm " << with_norm;
      EXPECT_EQ(a.scale, b.scale) << k.name;
      EXPECT_EQ(a.sum, b.sum) << k.name;
    }
  }
}

// Quantizing with the norm equals quantizing rmsnorm's output without it, bit for bit (the
// forward pass normalizes a LoRA term's input once and quantizes that).
TEST_P(KernelsTest, QuantizeRowsWithNormIsQuantizeOfRmsnorm) {
  const KernelTable& k = *GetParam();
  for (int32_t group : {32, 64, 512}) {
    const int64_t n_tokens = 3, cols = 1024, ldx = cols + 5;
    std::vector<float> x = Random(static_cast<size_t>(n_tokens * ldx), 21 + group, 3.0f);
    x[7] = -55.0f;  // an outlier
    const std::vector<float> w = Random(static_cast<size_t>(cols), 4);
    std::vector<float> xn(static_cast<size_t>(n_tokens * cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
      k.rmsnorm(x.data() + t * ldx, w.data(), 1e-6f, cols, xn.data() + t * cols);
    }
    Quantized fused(n_tokens, cols, group), apart(n_tokens, cols, group);
    k.quantize_rows(x.data(), ldx, n_tokens, cols, w.data(), 1e-6f, &fused.rows);
    k.quantize_rows(xn.data(), cols, n_tokens, cols, nullptr, 1e-6f, &apart.rows);
    EXPECT_EQ(fused.q, apart.q) << k.name << " group " << group;
    EXPECT_EQ(fused.scale, apart.scale) << k.name << " group " << group;
    EXPECT_EQ(fused.sum, apart.sum) << k.name << " group " << group;
  }
}

TEST_P(KernelsTest, PackedGemmIsBitExact) {
  const KernelTable& k = *GetParam();
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    for (int32_t group : {32, 64, 128}) {
      // Every pass size of the few-token path (1 to 12 tokens, and splits up to 15), the 16-token
      // blocks, and blocks with a rest.
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 37}) {
        for (bool explicit_min : {true, false}) {
          const int64_t rows = 80, cols = 512;
          RandomPacked w(codes, group, rows, cols, 5 + group, explicit_min);
          std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 17 + n_tokens);
          Quantized a(n_tokens, cols, group);
          reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
          for (Epilogue e : {Epilogue::kStore, Epilogue::kAccumulate}) {
            const int64_t ld = rows + 3;
            std::vector<float> want = Random(static_cast<size_t>(n_tokens * ld), 99);
            std::vector<float> got = want;
            // Panels [1, 4): rows 16..63 only; the rest must stay untouched.
            reference::PackedGemm(w.m, a.rows, 1, 4, {want.data(), ld, e});
            k.packed_gemm(w.m, a.rows, 1, 4, {got.data(), ld, e});
            ASSERT_EQ(want, got) << k.name << " codes " << int(codes) << " group " << group
                                 << " tokens " << n_tokens << " epilogue " << int(e) << " min "
                                 << explicit_min;
          }
        }
      }
    }
  }
}

TEST_P(KernelsTest, PackedGemmPartialLastPanelAndManyTokens) {
  const KernelTable& k = *GetParam();
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    const int64_t rows = 70, cols = 256, n_tokens = 69;  // 5 panels, the last with 6 rows
    RandomPacked w(codes, 64, rows, cols, 77, codes == PackedCodes::kU4);
    std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 78);
    Quantized a(n_tokens, cols, 64);
    reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
    std::vector<float> want = Random(static_cast<size_t>(n_tokens * rows), 79), got = want;
    reference::PackedGemm(w.m, a.rows, 0, 5, {want.data(), rows, Epilogue::kAccumulate});
    k.packed_gemm(w.m, a.rows, 0, 5, {got.data(), rows, Epilogue::kAccumulate});
    ASSERT_EQ(want, got) << k.name << " codes " << int(codes);
  }
}

TEST_P(KernelsTest, PrefillGemmIsBitExact) {
  const KernelTable& k = *GetParam();
  if (k.prefill_gemm == nullptr) GTEST_SKIP() << k.name << " has no prefill_gemm";
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    for (int32_t group : {32, 64}) {
      for (int32_t block : {64, 128, 256}) {
        for (int64_t n_tokens : {32, 45, 70}) {
          const int64_t rows = 70, cols = 512;
          RandomPacked w(codes, group, rows, cols, 90 + group, (block + n_tokens) % 2 == 0);
          std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 91 + n_tokens, 3.0f);
          Quantized a(n_tokens, cols, block);
          reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
          for (Epilogue e : {Epilogue::kStore, Epilogue::kAccumulate}) {
            std::vector<float> want = Random(static_cast<size_t>(n_tokens * rows), 92), got = want;
            reference::PrefillGemm(w.m, a.rows, 0, 5, {want.data(), rows, e});
            k.prefill_gemm(w.m, a.rows, 0, 5, {got.data(), rows, e});
            ASSERT_EQ(want, got) << k.name << " codes " << int(codes) << " group " << group
                                 << " block " << block << " tokens " << n_tokens;
          }
          std::vector<float> want(static_cast<size_t>(n_tokens * 32)), got(want.size());
          reference::PrefillGemm(w.m, a.rows, 0, 4, {want.data(), 32, Epilogue::kSwiGlu});
          k.prefill_gemm(w.m, a.rows, 0, 4, {got.data(), 32, Epilogue::kSwiGlu});
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-5f * std::fabs(want[i])) << k.name;
          }
        }
      }
    }
  }
}

TEST_P(KernelsTest, StreamReadSeesEveryByte) {
  const KernelTable& k = *GetParam();
  for (auto read : {k.stream_read, k.stream_read_prefetched}) {
    if (read == nullptr) continue;
    for (size_t n : {size_t{64}, size_t{320}, size_t{4096 + 192}}) {
      // The first, a middle (where a second stream may start) and the last byte.
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        std::vector<uint8_t> buf(n, 7);
        const uint64_t a = read(buf.data(), n);
        buf[at] ^= 0x5a;
        EXPECT_NE(a, read(buf.data(), n))
            << k.name << (read == k.stream_read ? " stream_read" : " stream_read_prefetched")
            << " ignores byte " << at << " of " << n;
      }
    }
  }
}

// Wide matrices: several cache chunks of panels (over 1 MB of weights for 16-token blocks), and
// rows too wide for a kernel's interleaved token block (more than 4096 columns), so the kernels
// fall back to their other many-token path.
TEST_P(KernelsTest, PackedGemmWideMatricesAreBitExact) {
  const KernelTable& k = *GetParam();
  for (int64_t cols : {4096, 4160}) {
    const int64_t rows = 16 * 18, n_tokens = 17;
    RandomPacked w(PackedCodes::kU8, 32, rows, cols, 31 + cols, cols == 4096);
    std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 32 + cols);
    Quantized a(n_tokens, cols, 32);
    reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
    std::vector<float> want = Random(static_cast<size_t>(n_tokens * rows), 33), got = want;
    reference::PackedGemm(w.m, a.rows, 1, 18, {want.data(), rows, Epilogue::kAccumulate});
    k.packed_gemm(w.m, a.rows, 1, 18, {got.data(), rows, Epilogue::kAccumulate});
    ASSERT_EQ(want, got) << k.name << " cols " << cols;
  }
}

// SwiGLU over many tokens (blocks of 16 and the rest, several chunks, panels not starting at 0)
// equals the same table run one token at a time, bit for bit: the per-token operations do not
// depend on how tokens are grouped.
TEST_P(KernelsTest, PackedGemmSwiGluManyTokensMatchOneAtATime) {
  const KernelTable& k = *GetParam();
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    const int64_t rows = 16 * 40, cols = 4096, n_tokens = 33;
    RandomPacked w(codes, 64, rows, cols, 41, codes == PackedCodes::kU4);
    std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 42, 4.0f);
    Quantized a(n_tokens, cols, 64);
    reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
    const int64_t ld = rows / 2;
    std::vector<float> all(static_cast<size_t>(n_tokens * ld), 0.0f), one = all;
    k.packed_gemm(w.m, a.rows, 2, 38, {all.data(), ld, Epilogue::kSwiGlu});
    for (int64_t t = 0; t < n_tokens; ++t) {
      QuantizedRows row = a.rows;
      row.q += t * cols;
      row.scale += t * (cols / 64);
      row.sum += t * (cols / 64);
      row.n_tokens = 1;
      k.packed_gemm(w.m, row, 2, 38, {one.data() + t * ld, ld, Epilogue::kSwiGlu});
    }
    ASSERT_EQ(all, one) << k.name << " codes " << int(codes);
  }
}

TEST_P(KernelsTest, PackedGemmSwiGluWithinTolerance) {
  const KernelTable& k = *GetParam();
  const int64_t rows = 128, cols = 256, n_tokens = 20;
  RandomPacked w(PackedCodes::kU4, 64, rows, cols, 8);
  std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 21, 4.0f);
  Quantized a(n_tokens, cols, 64);
  reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
  std::vector<float> want(static_cast<size_t>(n_tokens * rows / 2)), got(want.size());
  reference::PackedGemm(w.m, a.rows, 0, 8, {want.data(), rows / 2, Epilogue::kSwiGlu});
  k.packed_gemm(w.m, a.rows, 0, 8, {got.data(), rows / 2, Epilogue::kSwiGlu});
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-5f * std::fabs(want[i])) << k.name << " at " << i;
  }
}

// One token's rows of a quantized activation matrix, as a matrix of its own.
QuantizedRows TokenRows(const QuantizedRows& a, int64_t t) {
  QuantizedRows row = a;
  row.q += t * a.cols;
  row.scale += t * a.n_groups();
  row.sum += t * a.n_groups();
  row.n_tokens = 1;
  return row;
}

// GemmOut::add: store and accumulate with the term equal the reference bit for bit (partial last
// panel, every token path: decode, blocks, the rest); SwiGLU within the activation's tolerance,
// and bit for bit the same whether the tokens run together or one at a time.
TEST_P(KernelsTest, PackedGemmAddTermMatchesTheReference) {
  const KernelTable& k = *GetParam();
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    for (int64_t n_tokens : {1, 3, 16, 37, 70}) {
      const int32_t group = codes == PackedCodes::kU4 ? 64 : 32;
      const int64_t cols = 512;
      std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 61 + n_tokens);
      Quantized a(n_tokens, cols, group);
      reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
      {
        const int64_t rows = 70, ld = rows + 3, ld_add = rows + 5;  // 5 panels, the last partial
        RandomPacked w(codes, group, rows, cols, 62, codes == PackedCodes::kU4);
        const std::vector<float> add = Random(static_cast<size_t>(n_tokens * ld_add), 63, 0.5f);
        for (Epilogue e : {Epilogue::kStore, Epilogue::kAccumulate}) {
          std::vector<float> want = Random(static_cast<size_t>(n_tokens * ld), 64), got = want;
          reference::PackedGemm(w.m, a.rows, 1, 5, {want.data(), ld, e, add.data(), ld_add});
          k.packed_gemm(w.m, a.rows, 1, 5, {got.data(), ld, e, add.data(), ld_add});
          ASSERT_EQ(want, got) << k.name << " codes " << int(codes) << " tokens " << n_tokens
                               << " epilogue " << int(e);
        }
      }
      const int64_t rows = 128, half = rows / 2, ld = half + 3, ld_add = rows + 7;
      RandomPacked w(codes, group, rows, cols, 65, codes == PackedCodes::kU4);
      const std::vector<float> add = Random(static_cast<size_t>(n_tokens * ld_add), 66, 2.0f);
      std::vector<float> want(static_cast<size_t>(n_tokens * ld), 0.0f), got = want, one = want;
      reference::PackedGemm(w.m, a.rows, 2, 8,
                            {want.data(), ld, Epilogue::kSwiGlu, add.data(), ld_add});
      k.packed_gemm(w.m, a.rows, 2, 8, {got.data(), ld, Epilogue::kSwiGlu, add.data(), ld_add});
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-5f * std::fabs(want[i]))
            << k.name << " codes " << int(codes) << " tokens " << n_tokens << " at " << i;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        k.packed_gemm(
            w.m, TokenRows(a.rows, t), 2, 8,
            {one.data() + t * ld, ld, Epilogue::kSwiGlu, add.data() + t * ld_add, ld_add});
      }
      ASSERT_EQ(got, one) << k.name << " codes " << int(codes) << " tokens " << n_tokens;
    }
  }
}

TEST_P(KernelsTest, PrefillGemmAddTermMatchesTheReference) {
  const KernelTable& k = *GetParam();
  if (k.prefill_gemm == nullptr) GTEST_SKIP() << k.name << " has no prefill_gemm";
  for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
    for (int64_t n_tokens : {32, 45, 70}) {
      const int64_t cols = 512;
      std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 71 + n_tokens, 3.0f);
      Quantized a(n_tokens, cols, 128);
      reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
      {
        const int64_t rows = 70, ld = rows + 1, ld_add = rows + 9;
        RandomPacked w(codes, 64, rows, cols, 72, n_tokens % 2 == 0);
        const std::vector<float> add = Random(static_cast<size_t>(n_tokens * ld_add), 73, 0.5f);
        for (Epilogue e : {Epilogue::kStore, Epilogue::kAccumulate}) {
          std::vector<float> want = Random(static_cast<size_t>(n_tokens * ld), 74), got = want;
          reference::PrefillGemm(w.m, a.rows, 0, 5, {want.data(), ld, e, add.data(), ld_add});
          k.prefill_gemm(w.m, a.rows, 0, 5, {got.data(), ld, e, add.data(), ld_add});
          ASSERT_EQ(want, got) << k.name << " codes " << int(codes) << " tokens " << n_tokens
                               << " epilogue " << int(e);
        }
      }
      const int64_t rows = 128, ld = rows / 2, ld_add = rows + 3;
      RandomPacked w(codes, 64, rows, cols, 75, true);
      const std::vector<float> add = Random(static_cast<size_t>(n_tokens * ld_add), 76, 2.0f);
      std::vector<float> want(static_cast<size_t>(n_tokens * ld), 0.0f), got = want;
      reference::PrefillGemm(w.m, a.rows, 0, 8,
                             {want.data(), ld, Epilogue::kSwiGlu, add.data(), ld_add});
      k.prefill_gemm(w.m, a.rows, 0, 8, {got.data(), ld, Epilogue::kSwiGlu, add.data(), ld_add});
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-5f * std::fabs(want[i]))
            << k.name << " codes " << int(codes) << " tokens " << n_tokens << " at " << i;
      }
    }
  }
}

TEST_P(KernelsTest, DenseGemmAddTermIsBitExact) {
  const KernelTable& k = *GetParam();
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    const int64_t rows = 24, cols = 512, n_tokens = 7, ld_add = rows + 2;
    std::vector<float> wf = Random(static_cast<size_t>(rows * cols), 81);
    const size_t row_bytes = RowBytes(type, cols);
    std::vector<uint8_t> wq(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) QuantizeRow(type, &wf[r * cols], &wq[r * row_bytes], cols);
    WeightMatrix w{type, rows, cols, wq.data(), row_bytes};
    std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 82);
    const std::vector<float> add = Random(static_cast<size_t>(n_tokens * ld_add), 83);
    std::vector<float> scratch(static_cast<size_t>(KernelTable::DenseGemmScratchFloats(cols)));
    for (Epilogue e : {Epilogue::kStore, Epilogue::kAccumulate}) {
      std::vector<float> want = Random(static_cast<size_t>(n_tokens * rows), 84), got = want;
      reference::DenseGemm(w, x.data(), cols, n_tokens, 1, rows - 2,
                           {want.data(), rows, e, add.data(), ld_add}, scratch.data());
      k.dense_gemm(w, x.data(), cols, n_tokens, 1, rows - 2,
                   {got.data(), rows, e, add.data(), ld_add}, scratch.data());
      ASSERT_EQ(want, got) << k.name << " " << DTypeName(type) << " epilogue " << int(e);
    }
  }
}

// The LoRA output step: every table gives the reference's bits (f32 and bf16 factors, a range of
// outputs that is not a multiple of any vector width, several tokens with row strides), and the
// reference is the definition: y + sum over r of m[r] * bt[r][o], one multiply and add per r.
TEST_P(KernelsTest, LoraExpandIsBitExactAndMeansTheSum) {
  const KernelTable& k = *GetParam();
  ASSERT_NE(k.lora_expand, nullptr) << k.name;
  // Rank 19: a tile of 16 rank rows and a partial one (the second adds to the first's outputs).
  const int64_t rank = 19, cols = 611, ldm = rank + 3, ldy = cols + 7;
  const int64_t q_cols = 608;  // Q8_0 rows hold whole blocks of 32
  // One token (decode's own loop) and several (the tiled loop: groups of tokens and the rest).
  for (int64_t n : {1, 5, 9})
    for (DType type : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0}) {
      const int64_t w_cols = type == DType::kQ8_0 ? q_cols : cols;
      const std::vector<float> bf = Random(static_cast<size_t>(rank * w_cols), 101);
      const size_t row_bytes = RowBytes(type, w_cols);
      std::vector<uint8_t> bt(static_cast<size_t>(rank) * row_bytes);
      std::vector<float> exact(bf.size());
      for (int64_t r = 0; r < rank; ++r) {
        QuantizeRow(type, &bf[static_cast<size_t>(r * w_cols)],
                    &bt[static_cast<size_t>(r) * row_bytes], w_cols);
        DequantizeRow(type, &bt[static_cast<size_t>(r) * row_bytes],
                      &exact[static_cast<size_t>(r * w_cols)], w_cols);
      }
      const WeightMatrix w{type, rank, w_cols, bt.data(), row_bytes};
      // Q8_0 also blocked (WeightMatrix::block_stride: every rank row's block of each 32 outputs
      // together, as a loaded adapter package keeps B^T): the same results.
      std::vector<uint8_t> blocked_bytes(bt.size());
      WeightMatrix blocked = w;
      if (type == DType::kQ8_0) {
        for (int64_t j = 0; j < w_cols / 32; ++j) {
          for (int64_t r = 0; r < rank; ++r) {
            std::memcpy(&blocked_bytes[static_cast<size_t>((j * rank + r) * 34)],
                        &bt[static_cast<size_t>(r) * row_bytes + static_cast<size_t>(j) * 34], 34);
          }
        }
        blocked = {type, rank, w_cols, blocked_bytes.data(), 34, static_cast<size_t>(rank) * 34};
      }
      const std::vector<float> m = Random(static_cast<size_t>(n * ldm), 102);
      const std::vector<float> y0 = Random(static_cast<size_t>(n * ldy), 103);
      // A range with partial blocks at both ends, and one inside a single block of 32.
      // accumulate false: y's range is overwritten with the sum from +0 (its old values, random
      // here, are never read), the rest of y untouched.
      for (bool accumulate : {true, false})
        for (auto [ob, oe] : {std::pair<int64_t, int64_t>{3, w_cols - 5}, {35, 50}}) {
          std::vector<float> want = y0, got = y0;
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t o = ob; o < oe; ++o) {
              float acc = accumulate ? want[t * ldy + o] : 0.0f;
              for (int64_t r = 0; r < rank; ++r) {
                // volatile: the product is rounded on its own (no fused multiply-add in this file).
                const volatile float prod = m[t * ldm + r] * exact[r * w_cols + o];
                acc = acc + prod;
              }
              want[t * ldy + o] = acc;
            }
          }
          k.lora_expand(w, m.data(), ldm, n, ob, oe, got.data(), ldy, accumulate);
          ASSERT_EQ(want, got) << k.name << " " << DTypeName(type) << " tokens " << n << " outputs "
                               << ob << ".." << oe << " accumulate " << accumulate;
          if (type == DType::kQ8_0) {
            std::vector<float> got_blocked = y0;
            k.lora_expand(blocked, m.data(), ldm, n, ob, oe, got_blocked.data(), ldy, accumulate);
            ASSERT_EQ(want, got_blocked) << k.name << " blocked, tokens " << n << " outputs " << ob
                                         << ".." << oe << " accumulate " << accumulate;
          }
        }
    }
}

// The reference defines the add term's arithmetic: kStore adds it to the product (one rounding),
// kAccumulate adds that sum to y, and SwiGLU takes silu(gate + a) * (up + b), each term at its
// logical output column; the same numbers, bit for bit, from the matrix's plain kStore outputs.
TEST(ReferenceKernelsTest, AddTermIsTheProductPlusTheTerm) {
  const int64_t rows = 96, cols = 256, n_tokens = 5, ld_add = rows + 4;
  RandomPacked w(PackedCodes::kU4, 64, rows, cols, 91);
  std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), 92, 3.0f);
  const std::vector<float> add = Random(static_cast<size_t>(n_tokens * ld_add), 93, 2.0f);
  const std::vector<float> base = Random(static_cast<size_t>(n_tokens * rows), 94);
  for (bool prefill : {false, true}) {
    Quantized a(n_tokens, cols, prefill ? 128 : 64);
    reference::QuantizeRows(x.data(), cols, n_tokens, cols, nullptr, 0.0f, &a.rows);
    const auto gemm = prefill ? reference::PrefillGemm : reference::PackedGemm;
    std::vector<float> plain(static_cast<size_t>(n_tokens * rows));
    gemm(w.m, a.rows, 0, 6, {plain.data(), rows, Epilogue::kStore});
    std::vector<float> stored(plain.size()), accumulated = base;
    gemm(w.m, a.rows, 0, 6, {stored.data(), rows, Epilogue::kStore, add.data(), ld_add});
    gemm(w.m, a.rows, 0, 6, {accumulated.data(), rows, Epilogue::kAccumulate, add.data(), ld_add});
    const int64_t half = rows / 2;
    std::vector<float> swiglu(static_cast<size_t>(n_tokens * half));
    gemm(w.m, a.rows, 0, 6, {swiglu.data(), half, Epilogue::kSwiGlu, add.data(), ld_add});
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = static_cast<size_t>(t * rows + r);
        const float sum = plain[i] + add[static_cast<size_t>(t * ld_add + r)];
        ASSERT_EQ(stored[i], sum) << "prefill " << prefill << " token " << t << " row " << r;
        ASSERT_EQ(accumulated[i], base[i] + sum) << "prefill " << prefill << " token " << t;
      }
      for (int64_t j = 0; j < half; ++j) {
        // Output column j: gate row 32 (j / 16) + j % 16, up row that + 16.
        const int64_t gate_row = 32 * (j / 16) + j % 16;
        const float g = plain[static_cast<size_t>(t * rows + gate_row)] +
                        add[static_cast<size_t>(t * ld_add + j)];
        const float u = plain[static_cast<size_t>(t * rows + gate_row + 16)] +
                        add[static_cast<size_t>(t * ld_add + half + j)];
        ASSERT_EQ(swiglu[static_cast<size_t>(t * half + j)], reference::Silu(g) * u)
            << "prefill " << prefill << " token " << t << " column " << j;
      }
    }
  }
  // Dense: the same store / accumulate arithmetic.
  std::vector<float> wf = Random(static_cast<size_t>(rows * cols), 95);
  WeightMatrix dense{DType::kF32, rows, cols, reinterpret_cast<const uint8_t*>(wf.data()),
                     static_cast<size_t>(cols) * sizeof(float)};
  std::vector<float> scratch(static_cast<size_t>(cols)), plain(base.size()), stored(base.size()),
      accumulated = base;
  reference::DenseGemm(dense, x.data(), cols, n_tokens, 0, rows, {plain.data(), rows},
                       scratch.data());
  reference::DenseGemm(dense, x.data(), cols, n_tokens, 0, rows,
                       {stored.data(), rows, Epilogue::kStore, add.data(), ld_add}, scratch.data());
  reference::DenseGemm(dense, x.data(), cols, n_tokens, 0, rows,
                       {accumulated.data(), rows, Epilogue::kAccumulate, add.data(), ld_add},
                       scratch.data());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = static_cast<size_t>(t * rows + r);
      const float sum = plain[i] + add[static_cast<size_t>(t * ld_add + r)];
      ASSERT_EQ(stored[i], sum) << "dense token " << t << " row " << r;
      ASSERT_EQ(accumulated[i], base[i] + sum) << "dense token " << t << " row " << r;
    }
  }
}

// KvHeadView's accessors address the layout kernel_table.h documents: K [n_ctx / 16][head_dim][16],
// V [n_ctx][head_dim], one scale per position.
TEST(KvHeadViewTest, AccessorsAddressTheDocumentedLayout) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
    const int32_t hd = 40;
    const int64_t n_ctx = 48;
    const size_t elem = KvElementBytes(type);
    std::vector<uint8_t> kbuf(static_cast<size_t>(n_ctx * hd) * elem), vbuf(kbuf.size());
    std::vector<float> ks(n_ctx), vs(n_ctx);
    const KvHeadView kv{type, hd, kbuf.data(), vbuf.data(), ks.data(), vs.data()};
    EXPECT_EQ(static_cast<size_t>(kv.ElementBytes()), elem);
    EXPECT_EQ(static_cast<size_t>(kv.BlockBytes()), 16 * hd * elem);
    for (int64_t pos = 0; pos < n_ctx; ++pos) {
      const int64_t b = pos / 16;
      for (int64_t d = 0; d < hd; d += 7) {
        const uint8_t* kb = kv.KeyRow<const uint8_t>(b, d) + (pos % 16) * elem;
        ASSERT_EQ(kb, kbuf.data() + ((pos / 16) * hd * 16 + d * 16 + pos % 16) * elem);
      }
      ASSERT_EQ(kv.ValueRow<const uint8_t>(pos), vbuf.data() + pos * hd * elem);
      ASSERT_EQ(kv.KeyScale(pos), ks.data() + pos);
      ASSERT_EQ(kv.ValueScale(pos), vs.data() + pos);
      ASSERT_EQ(kv.KeyScales(b) + pos % 16, ks.data() + pos);
      ASSERT_EQ(kv.ValueScales(b) + pos % 16, vs.data() + pos);
    }
    ASSERT_EQ(kv.KeyBlock<const uint8_t>(2), kbuf.data() + 2 * 16 * hd * elem);
    ASSERT_EQ(kv.KeyBlock<const float>(1), kv.KeyRow<const float>(1, 0));
  }
}

TEST_P(KernelsTest, DenseGemmIsBitExact) {
  const KernelTable& k = *GetParam();
  for (int ti = 0; ti < static_cast<int>(DType::kCount); ++ti) {
    const DType type = static_cast<DType>(ti);
    const int64_t rows = 24, cols = 512 + 256 * (type == DType::kF32 ? 0 : 1);
    std::vector<float> wf = Random(static_cast<size_t>(rows * cols), 31 + ti);
    const size_t row_bytes = RowBytes(type, cols);
    std::vector<uint8_t> wq(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) QuantizeRow(type, &wf[r * cols], &wq[r * row_bytes], cols);
    WeightMatrix w{type, rows, cols, wq.data(), row_bytes};
    // 1 and 2 tokens (the few-token form), 5, 8, 9, 11 and 14 (blocks of 6 tokens when the
    // columns are whole vectors, then of 4, then the last 1, 2 or 3 together); rows [2, 23):
    // blocks of 4 rows and the rest.
    for (int64_t n_tokens : {1, 2, 5, 8, 9, 11, 14}) {
      std::vector<float> x = Random(static_cast<size_t>(n_tokens * (cols + 3)), 41);
      for (Epilogue e : {Epilogue::kStore, Epilogue::kAccumulate}) {
        std::vector<float> want = Random(static_cast<size_t>(n_tokens * rows), 5), got = want;
        std::vector<float> scratch(static_cast<size_t>(KernelTable::DenseGemmScratchFloats(cols)));
        reference::DenseGemm(w, x.data(), cols + 3, n_tokens, 2, rows - 1, {want.data(), rows, e},
                             scratch.data());
        k.dense_gemm(w, x.data(), cols + 3, n_tokens, 2, rows - 1, {got.data(), rows, e},
                     scratch.data());
        ASSERT_EQ(want, got) << k.name << " " << DTypeName(type) << " tokens " << n_tokens;
      }
    }
  }
}

TEST_P(KernelsTest, NormRopeSiluKvStore) {
  const KernelTable& k = *GetParam();
  for (int64_t n : {64, 100, 896}) {
    std::vector<float> x = Random(static_cast<size_t>(n), n, 5.0f),
                       w = Random(static_cast<size_t>(n), 2);
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    reference::Rmsnorm(x.data(), w.data(), 1e-6f, n, a.data());
    k.rmsnorm(x.data(), w.data(), 1e-6f, n, b.data());
    EXPECT_EQ(a, b) << k.name << " rmsnorm " << n;
    std::vector<float> g = Random(static_cast<size_t>(n), 8, 6.0f);
    reference::SiluMul(g.data(), x.data(), n, a.data());
    k.silu_mul(g.data(), x.data(), n, b.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5f + 1e-5f * std::fabs(a[i])) << k.name;
  }
  for (bool interleaved : {false, true}) {
    for (int64_t hd : {64, 128}) {
      std::vector<float> x = Random(static_cast<size_t>(14 * hd), 4), y = x;
      std::vector<float> cs = Random(static_cast<size_t>(hd / 2), 5),
                         sn = Random(static_cast<size_t>(hd / 2), 6);
      reference::Rope(x.data(), 14, hd, cs.data(), sn.data(), interleaved);
      k.rope(y.data(), 14, hd, cs.data(), sn.data(), interleaved);
      EXPECT_EQ(x, y) << k.name << " rope";
    }
  }
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
    const int32_t hd = 64;
    const int64_t n_ctx = 48;
    std::vector<uint8_t> ka(n_ctx * hd * 4), va(ka.size()), kb(ka.size()), vb(ka.size());
    std::vector<float> ksa(n_ctx), vsa(n_ctx), ksb(n_ctx), vsb(n_ctx);
    KvHeadView a{type, hd, ka.data(), va.data(), ksa.data(), vsa.data()};
    KvHeadView b{type, hd, kb.data(), vb.data(), ksb.data(), vsb.data()};
    std::vector<float> kv = Random(static_cast<size_t>(20 * 3 * hd), 12, 2.0f);
    reference::KvStore(a, 5, 20, kv.data(), 3 * hd, kv.data() + hd, 3 * hd);
    k.kv_store(b, 5, 20, kv.data(), 3 * hd, kv.data() + hd, 3 * hd);
    const size_t elem = KvElementBytes(type);
    for (int64_t pos = 5; pos < 25; ++pos) {
      for (int32_t d = 0; d < hd; ++d) {
        const size_t ki = ((pos / 16) * hd * 16 + d * 16 + pos % 16) * elem;
        const size_t vi = (pos * hd + d) * elem;
        ASSERT_EQ(std::memcmp(&ka[ki], &kb[ki], elem), 0) << k.name << " K " << pos << "," << d;
        ASSERT_EQ(std::memcmp(&va[vi], &vb[vi], elem), 0) << k.name << " V " << pos << "," << d;
      }
      if (type == KvType::kQ8) {
        ASSERT_EQ(ksa[pos], ksb[pos]);
        ASSERT_EQ(vsa[pos], vsb[pos]);
      }
    }
  }
}

TEST_P(KernelsTest, AttentionWithinTolerance) {
  const KernelTable& k = *GetParam();
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
    for (int32_t hd : {64, 128}) {
      const int32_t n_q_heads = 7;
      const int64_t n_ctx = 80, pos0 = 37, n_tokens = 21;  // tokens at positions 37..57
      const size_t plane = static_cast<size_t>(n_ctx * hd) * KvElementBytes(type);
      std::vector<uint8_t> kbuf(plane), vbuf(plane);
      std::vector<float> ks(n_ctx), vs(n_ctx);
      KvHeadView kv{type, hd, kbuf.data(), vbuf.data(), ks.data(), vs.data()};
      std::vector<float> keys = Random(static_cast<size_t>((pos0 + n_tokens) * hd), 3, 2.0f);
      std::vector<float> vals = Random(static_cast<size_t>((pos0 + n_tokens) * hd), 4);
      reference::KvStore(kv, 0, pos0 + n_tokens, keys.data(), hd, vals.data(), hd);
      const int64_t ld = n_q_heads * hd + 5;
      std::vector<float> q = Random(static_cast<size_t>(n_tokens * ld), 6, 2.0f);
      std::vector<float> want(static_cast<size_t>(n_tokens * ld)), got(want.size());
      std::vector<float> scratch(static_cast<size_t>(AttentionScratchFloats(n_q_heads, hd)));
      // Hidden ranges (tree attention): none, unaligned across blocks, a whole block, and one
      // covering some of the tokens' own positions.
      const std::pair<int64_t, int64_t> hidden[] = {{0, 0}, {5, 40}, {16, 32}, {37, 45}, {20, 23}};
      // Causal, and bidirectional within the tokens (every token sees them all: visible_end).
      for (const int64_t visible_end : {int64_t{0}, pos0 + n_tokens})
        for (const auto& [hidden_begin, hidden_end] : hidden) {
          for (int64_t t0 : {int64_t{0}, int64_t{16}}) {
            AttentionTask task{q.data(),
                               ld,
                               want.data(),
                               ld,
                               kv,
                               n_q_heads,
                               pos0,
                               t0,
                               std::min<int64_t>(n_tokens, t0 + 16),
                               1.0f / std::sqrt(float(hd))};
            task.hidden_begin = hidden_begin;
            task.hidden_end = hidden_end;
            task.visible_end = visible_end;
            reference::Attention(task, scratch.data());
            task.out = got.data();
            k.attention(task, scratch.data());
          }
          if (visible_end > 0 && hidden_begin == 0 && hidden_end == 0) {
            // The first token sees the later ones (its output differs from the causal one), the
            // last sees exactly what it sees causally.
            std::vector<float> causal(want.size());
            for (int64_t t0 : {int64_t{0}, int64_t{16}}) {
              AttentionTask c{q.data(),
                              ld,
                              causal.data(),
                              ld,
                              kv,
                              n_q_heads,
                              pos0,
                              t0,
                              std::min<int64_t>(n_tokens, t0 + 16),
                              1.0f / std::sqrt(float(hd))};
              reference::Attention(c, scratch.data());
            }
            EXPECT_NE(causal[0], want[0]) << "visible_end ignored";
            const size_t last = static_cast<size_t>((n_tokens - 1) * ld);
            EXPECT_EQ(causal[last], want[last]);
          }
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t i = 0; i < n_q_heads * hd; ++i) {
              const float a = want[static_cast<size_t>(t * ld + i)],
                          b = got[static_cast<size_t>(t * ld + i)];
              ASSERT_NEAR(a, b, 2e-5f + 2e-5f * std::fabs(a))
                  << k.name << " kv " << KvTypeName(type) << " hd " << hd << " hidden ["
                  << hidden_begin << ", " << hidden_end << ") token " << t << " i " << i;
            }
          }
        }
    }
  }
}

// A view whose later blocks live in a separate tail (KvHeadView::tail_block: a draft tree's
// gathered rows) gives bit for bit what the same rows give in place; the region the tail replaces
// is never read (filled with NaN here).
TEST_P(KernelsTest, AttentionThroughATailIsTheSameAsInPlace) {
  const KernelTable& k = *GetParam();
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
    for (int32_t hd : {8, 64, 128}) {
      const int32_t n_q_heads = 3;
      const int64_t n_ctx = 64, pos0 = 37, n_tokens = 9;  // tokens at positions 37..45
      const int64_t eb = static_cast<int64_t>(KvElementBytes(type));
      const size_t plane = static_cast<size_t>(n_ctx * hd * eb);
      std::vector<uint8_t> kbuf(plane), vbuf(plane);
      std::vector<float> ks(n_ctx), vs(n_ctx);
      KvHeadView kv{type, hd, kbuf.data(), vbuf.data(), ks.data(), vs.data()};
      std::vector<float> keys = Random(static_cast<size_t>((pos0 + n_tokens) * hd), 3, 2.0f);
      std::vector<float> vals = Random(static_cast<size_t>((pos0 + n_tokens) * hd), 4);
      reference::KvStore(kv, 0, pos0 + n_tokens, keys.data(), hd, vals.data(), hd);
      // Blocks 2 and 3 (positions 32..63) moved to a tail; their place in the cache poisoned.
      const int64_t tail_block = 2, n_tail = 2;
      const size_t tail_bytes = static_cast<size_t>(n_tail * 16 * hd * eb);
      std::vector<uint8_t> tk(tail_bytes), tv(tail_bytes);
      std::vector<float> tks(n_tail * 16), tvs(n_tail * 16);
      std::memcpy(tk.data(), kbuf.data() + tail_block * 16 * hd * eb, tail_bytes);
      std::memcpy(tv.data(), vbuf.data() + tail_block * 16 * hd * eb, tail_bytes);
      std::memcpy(tks.data(), ks.data() + tail_block * 16, tks.size() * sizeof(float));
      std::memcpy(tvs.data(), vs.data() + tail_block * 16, tvs.size() * sizeof(float));
      const int64_t ld = n_q_heads * hd;
      std::vector<float> q = Random(static_cast<size_t>(n_tokens * ld), 6, 2.0f);
      std::vector<float> want(static_cast<size_t>(n_tokens * ld)), got(want.size());
      std::vector<float> scratch(static_cast<size_t>(AttentionScratchFloats(n_q_heads, hd)));
      AttentionTask task{q.data(),  ld,   want.data(), ld,       kv,
                         n_q_heads, pos0, 0,           n_tokens, 1.0f / std::sqrt(float(hd))};
      k.attention(task, scratch.data());
      std::vector<uint8_t> poisoned_k = kbuf, poisoned_v = vbuf;
      std::vector<float> poisoned_ks = ks, poisoned_vs = vs;
      if (type == KvType::kF32) {
        const float nan = std::nanf("");
        for (size_t i = static_cast<size_t>(tail_block * 16 * hd); i < plane / 4; ++i) {
          std::memcpy(poisoned_k.data() + 4 * i, &nan, 4);
          std::memcpy(poisoned_v.data() + 4 * i, &nan, 4);
        }
      } else {
        std::fill(poisoned_k.begin() + tail_block * 16 * hd * eb, poisoned_k.end(), 0x7f);
        std::fill(poisoned_v.begin() + tail_block * 16 * hd * eb, poisoned_v.end(), 0x7f);
      }
      std::fill(poisoned_ks.begin() + tail_block * 16, poisoned_ks.end(), std::nanf(""));
      std::fill(poisoned_vs.begin() + tail_block * 16, poisoned_vs.end(), std::nanf(""));
      task.kv = KvHeadView{
          type, hd, poisoned_k.data(), poisoned_v.data(), poisoned_ks.data(), poisoned_vs.data()};
      task.kv.tail_block = tail_block;
      task.kv.tail_k = tk.data();
      task.kv.tail_v = tv.data();
      task.kv.tail_k_scale = tks.data();
      task.kv.tail_v_scale = tvs.data();
      task.out = got.data();
      k.attention(task, scratch.data());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(want[i], got[i])
            << k.name << " kv " << KvTypeName(type) << " hd " << hd << " output " << i;
      }
    }
  }
}

TEST_P(KernelsTest, LogSumExpMatchesTheReference) {
  const KernelTable& k = *GetParam();
  if (k.log_sum_exp == nullptr) GTEST_SKIP() << k.name << " uses the reference's";
  for (int64_t n : {1, 5, 16, 17, 100, 1024, 65536, 151936}) {
    std::vector<float> x =
        Random(static_cast<size_t>(n), 70 + static_cast<uint32_t>(n % 97), 12.0f);
    x[static_cast<size_t>(n / 2)] = 30.0f;  // one dominant logit
    const double want = reference::LogSumExp(x.data(), n), got = k.log_sum_exp(x.data(), n);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-5) << k.name << " n " << n;
  }
}

// The tile form of prefill attention against its definition (bf16 operands, chunks of 32: tight)
// and against the fp32 attention (within bf16 rounding), with full and partial 16-token tasks.
TEST_P(KernelsTest, PrefillAttentionMatchesItsDefinition) {
  const KernelTable& k = *GetParam();
  if (k.prefill_attention == nullptr) GTEST_SKIP() << k.name << " has no prefill attention";
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
    for (int32_t hd : {64, 128}) {
      const int32_t n_q_heads = 7;
      const int64_t pos0 = 37, n_tokens = 53, n_ctx = 96;  // a partial last block of 5 tokens
      const size_t plane = static_cast<size_t>(n_ctx * hd) * KvElementBytes(type);
      // Cache bytes past the last position are NaN: the kernel must not let them through.
      std::vector<uint8_t> kbuf(plane, 0xff), vbuf(plane, 0xff);
      std::vector<float> ks(n_ctx), vs(n_ctx);
      KvHeadView kv{type, hd, kbuf.data(), vbuf.data(), ks.data(), vs.data()};
      std::vector<float> keys = Random(static_cast<size_t>((pos0 + n_tokens) * hd), 3, 2.0f);
      std::vector<float> vals = Random(static_cast<size_t>((pos0 + n_tokens) * hd), 4);
      reference::KvStore(kv, 0, pos0 + n_tokens, keys.data(), hd, vals.data(), hd);
      const int64_t ld = n_q_heads * hd + 5;
      std::vector<float> q = Random(static_cast<size_t>(n_tokens * ld), 6, 2.0f);
      std::vector<float> exact(static_cast<size_t>(n_tokens * ld)), defined(exact.size()),
          got(exact.size());
      std::vector<float> scratch(static_cast<size_t>(AttentionScratchFloats(n_q_heads, hd)));
      for (int64_t t0 = 0; t0 < n_tokens; t0 += 16) {
        AttentionTask task{q.data(),
                           ld,
                           exact.data(),
                           ld,
                           kv,
                           n_q_heads,
                           pos0,
                           t0,
                           std::min<int64_t>(n_tokens, t0 + 16),
                           1.0f / std::sqrt(float(hd))};
        reference::Attention(task, scratch.data());
        task.out = defined.data();
        reference::PrefillAttentionBf16(task, scratch.data());
        task.out = got.data();
        k.prefill_attention(task, scratch.data());
      }
      // Tasks the tiles take (f16 cache, whole 16-token blocks) follow the bf16 definition; the
      // rest (f32 and int8 caches, the last partial block) the fp32 attention.
      for (int64_t t = 0; t < n_tokens; ++t) {
        const bool tiled = type == KvType::kF16 && t < n_tokens / 16 * 16;
        for (int64_t i = 0; i < n_q_heads * hd; ++i) {
          const size_t at = static_cast<size_t>(t * ld + i);
          const float want = tiled ? defined[at] : exact[at];
          ASSERT_NEAR(got[at], want, 2e-4f + 2e-4f * std::fabs(want))
              << k.name << " kv " << KvTypeName(type) << " hd " << hd << " token " << t << " i "
              << i << (tiled ? " (tiles)" : " (vector)");
          ASSERT_NEAR(got[at], exact[at], 2e-2f + 2e-2f * std::fabs(exact[at]))
              << k.name << " against fp32 attention, token " << t << " i " << i;
        }
      }
    }
  }
}

std::string TableName(const ::testing::TestParamInfo<const KernelTable*>& info) {
  return std::string(info.param->name);
}

INSTANTIATE_TEST_SUITE_P(AllTables, KernelsTest, ::testing::ValuesIn(AvailableKernelTables()),
                         TableName);

TEST(KernelSelectionTest, BestTableAndForcing) {
  const std::vector<const KernelTable*> tables = AvailableKernelTables();
  ASSERT_FALSE(tables.empty());
  EXPECT_EQ(tables.front()->name, "reference");
  EXPECT_EQ(&BestKernels(), tables.back());
  auto forced = SelectKernels(KernelOptions{"reference", true});
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ((*forced)->name, "reference");
  auto missing = SelectKernels(KernelOptions{"no-such-isa", true});
  EXPECT_FALSE(missing.ok());
  // The default is POCKET_KERNELS's table when the suite runs under it and this CPU runs that
  // table (not so under qemu's baseline CPU), else the best.
  const std::string env = KernelsFromEnvironment();
  const bool env_runs = std::any_of(tables.begin(), tables.end(),
                                    [&](const KernelTable* t) { return t->name == env; });
  EXPECT_EQ(SelectKernels().name, env_runs ? env : tables.back()->name);
  std::printf("kernel tables on this CPU:");
  for (const KernelTable* t : tables) std::printf(" %s", std::string(t->name).c_str());
  std::printf("\n");
}

// POCKET_KERNELS forces the default table; --kernels (KernelOptions::force) wins over it; a name
// this CPU cannot run is an error naming the variable, not a silent fall back to another table.
TEST(KernelSelectionTest, EnvironmentForcesTheDefault) {
  const std::string saved = KernelsFromEnvironment();
  const bool was_set = std::getenv(kKernelsEnvVar) != nullptr;
  ASSERT_EQ(setenv(kKernelsEnvVar, "reference", 1), 0);
  auto chosen = SelectKernels(KernelOptions{});
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ((*chosen)->name, "reference");
  auto option_wins = SelectKernels(KernelOptions{std::string(BestKernels().name), true});
  ASSERT_TRUE(option_wins.ok());
  EXPECT_EQ(*option_wins, &BestKernels());
  ASSERT_EQ(setenv(kKernelsEnvVar, "no-such-isa", 1), 0);
  auto bad = SelectKernels(KernelOptions{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("POCKET_KERNELS=\"no-such-isa\""), std::string::npos)
      << bad.status().message();
  ASSERT_EQ(setenv(kKernelsEnvVar, "", 1), 0);  // empty: as unset
  auto best = SelectKernels(KernelOptions{});
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(*best, &BestKernels());
  if (was_set) {
    setenv(kKernelsEnvVar, saved.c_str(), 1);
  } else {
    unsetenv(kKernelsEnvVar);
  }
}

}  // namespace
}  // namespace pocket
