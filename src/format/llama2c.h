// llama.cpp's predecessor llama2.c: a "legacy" (version 0) checkpoint is a header of 7 int32
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size
// means a separate classifier) followed by float32 weights stacked over layers. We expose each
// layer's slice as a tensor named like GGUF's (blk.N.attn_q.weight), in place in the mapping.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "format/tensor_info.h"

namespace pocket {

struct Llama2cHeader {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // made positive; see shared_classifier
  int32_t seq_len = 0;
  bool shared_classifier = true;
};

class Llama2cCheckpoint {
 public:
  static StatusOr<std::unique_ptr<Llama2cCheckpoint>> Open(const std::string& path);
  static StatusOr<std::unique_ptr<Llama2cCheckpoint>> Parse(const uint8_t* data, size_t size,
                                                            std::string name);
  // True if the first bytes look like a plausible llama2.c header (used to detect the format).
  static bool LooksLikeLlama2c(const uint8_t* data, size_t size);

  const Llama2cHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  Llama2cCheckpoint() = default;
  Status ParseAll(const uint8_t* data, size_t size, const std::string& name);
  std::unique_ptr<MappedFile> file_;
  Llama2cHeader header_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace pocket
