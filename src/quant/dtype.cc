#include "quant/dtype.h"

#include "quant/blocks.h"

namespace pocket {

const DTypeTraits& Traits(DType type) {
  static const DTypeTraits kTraits[] = {
      {"f32", 1, 4},
      {"f16", 1, 2},
      {"bf16", 1, 2},
      {"q8_0", kQK, sizeof(BlockQ8_0)},
      {"q4_0", kQK, sizeof(BlockQ4_0)},
      {"q4_1", kQK, sizeof(BlockQ4_1)},
      {"q4_k", kQKK, sizeof(BlockQ4_K)},
      {"q6_k", kQKK, sizeof(BlockQ6_K)},
  };
  static_assert(sizeof(kTraits) / sizeof(kTraits[0]) == static_cast<size_t>(DType::kCount));
  return kTraits[static_cast<size_t>(type)];
}

bool ParseDType(std::string_view name, DType* out) {
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    DType t = static_cast<DType>(i);
    if (Traits(t).name == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

}  // namespace pocket
