// Weight element types and their block layouts. A row of n elements of a block type occupies
// n / block_elems blocks of block_bytes each; rows must be a whole number of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pocket {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // 32 weights: fp16 d, int8 q[32]; w = d * q
  kQ4_0,  // 32 weights: fp16 d, 16 bytes of nibbles; w = d * (q - 8)
  kQ4_1,  // 32 weights: fp16 d, fp16 m, nibbles; w = d * q + m
  kQ4_K,  // 256 weights: fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
  kQ6_K,  // 256 weights: 128 bytes low nibbles, 64 bytes high 2 bits, int8 scales[16], fp16 d
  kCount,
};

struct DTypeTraits {
  std::string_view name;  // "q4_k", as the CLI spells it
  int32_t block_elems;    // 1 for plain floats
  int32_t block_bytes;
};

const DTypeTraits& Traits(DType type);
inline std::string_view DTypeName(DType type) {
  return Traits(type).name;
}
// Parses a CLI spelling ("f16", "q4_0"); false when unknown.
bool ParseDType(std::string_view name, DType* out);

inline bool IsBlockAligned(DType type, int64_t n_elems) {
  return n_elems % Traits(type).block_elems == 0;
}
// Bytes of a row of n_elems (which must be block-aligned).
inline size_t RowBytes(DType type, int64_t n_elems) {
  const DTypeTraits& t = Traits(type);
  return static_cast<size_t>(n_elems / t.block_elems) * static_cast<size_t>(t.block_bytes);
}
// Bits per weight of the layout (for reports).
inline double BitsPerWeight(DType type) {
  const DTypeTraits& t = Traits(type);
  return 8.0 * t.block_bytes / t.block_elems;
}

}  // namespace pocket
