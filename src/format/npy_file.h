// Reading NumPy .npy arrays (format versions 1 to 3): little-endian float16 / float32 / float64,
// C order, any shape, returned as float32. Used by `pocket convert --classifier-head`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace pocket {

struct NpyArray {
  std::vector<int64_t> shape;  // outermost first; empty for a scalar
  std::vector<float> data;     // C order
};

// Errors name the file and what is wrong with it (dtype, order, size).
StatusOr<NpyArray> ReadNpy(const std::string& path);
// Parses bytes already in memory; `name` is used in messages.
StatusOr<NpyArray> ParseNpy(std::string_view bytes, const std::string& name);
// Whether the bytes start with the .npy magic.
bool LooksLikeNpy(std::string_view bytes);

}  // namespace pocket
