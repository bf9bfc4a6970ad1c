// Writes float32 arrays as NumPy .npy (format 1.0) files, atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace pocket::cli {

Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                       const float* data);

}  // namespace pocket::cli
