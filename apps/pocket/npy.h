// Writes float32 arrays as NumPy .npy (format 1.0) files, atomically, never over an input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace pocket::cli {

// `inputs`: every file the command read (OutputFile::Create refuses to write over one).
Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                       const float* data, const std::vector<std::string>& inputs);

}  // namespace pocket::cli
