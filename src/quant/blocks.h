// Block structs of the GGUF (ggml) quantized layouts, as stored in files. All little-endian;
// fp16 fields are raw IEEE half bits.
#pragma once

#include <cstdint>

namespace pocket {

inline constexpr int kQK = 32;    // elements per Q8_0 / Q4_0 / Q4_1 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // element i in the low nibble of qs[i], element i+16 in the high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];    // 8 sub-blocks of 32: 6-bit scale and 6-bit min each, packed
  uint8_t qs[kQKK / 2];  // 4 chunks of 64: byte l holds element l (low) and l+32 (high)
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace pocket
