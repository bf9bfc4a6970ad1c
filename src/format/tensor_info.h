// A tensor as a file holds it: a typed, shaped view into mapped bytes (no copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/dtype.h"
#include "quant/packed.h"

namespace pocket {

struct TensorInfo {
  std::string name;
  // Supported element type; when !type_supported, `type_name` says what the file has.
  DType type = DType::kF32;
  bool type_supported = true;
  std::string type_name;
  // Outermost first (PyTorch order): a matrix is [rows = out_features, cols = in_features].
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  // .pocket packages also hold matrices in the packed integer layout (quant/packed.h); then
  // `layout` describes them and `type` is meaningless.
  bool packed = false;
  PackedLayout layout;

  int64_t n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

}  // namespace pocket
