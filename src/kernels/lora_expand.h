// The output step of a LoRA term (y += B · mid with B stored transposed, bt [rank, cols]), as a
// plain loop each kernel table's file compiles with its own instruction set (the compiler
// vectorizes it along the outputs). Every element is a multiply and an add per rank row, in rank
// order, with contraction off in this library: the same bits on every table. Internal linkage:
// each including file gets its own copy, built for its own instruction set.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"

namespace pocket {
namespace {

template <typename Row>
inline void LoraExpandTyped(const WeightMatrix& bt, const float* m, int64_t ldm, int64_t n,
                            int64_t o_begin, int64_t o_end, float* y, int64_t ldy, Row load) {
  // Blocks of outputs small enough that the block's rows of bt stay in L1 across the tokens.
  constexpr int64_t kBlock = 256;
  for (int64_t b = o_begin; b < o_end; b += kBlock) {
    const int64_t e = b + kBlock < o_end ? b + kBlock : o_end;
    for (int64_t t = 0; t < n; ++t) {
      float* out = y + t * ldy;
      const float* mt = m + t * ldm;
      for (int64_t r = 0; r < bt.rows; ++r) {
        const float s = mt[r];
        const uint8_t* row = bt.row(r);
        for (int64_t o = b; o < e; ++o) out[o] = out[o] + s * load(row, o);
      }
    }
  }
}

[[maybe_unused]] void LoraExpandImpl(const WeightMatrix& bt, const float* m, int64_t ldm, int64_t n,
                                     int64_t o_begin, int64_t o_end, float* y, int64_t ldy) {
  if (bt.type == DType::kBF16) {
    LoraExpandTyped(bt, m, ldm, n, o_begin, o_end, y, ldy, [](const uint8_t* row, int64_t o) {
      uint16_t h;
      std::memcpy(&h, row + o * 2, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    });
  } else {
    LoraExpandTyped(bt, m, ldm, n, o_begin, o_end, y, ldy, [](const uint8_t* row, int64_t o) {
      float f;
      std::memcpy(&f, row + o * 4, 4);
      return f;
    });
  }
}

}  // namespace
}  // namespace pocket
