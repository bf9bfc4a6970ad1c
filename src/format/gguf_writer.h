// GGUF v3 writer: metadata, then tensor infos, then aligned tensor data. Tensor bytes are produced
// one tensor at a time while writing (by a callback), so a multi-gigabyte model never sits in
// memory whole. The output is written to a temporary file and renamed at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"

namespace pocket {

class GgufWriter {
 public:
  // Fills `out` (already sized to the tensor's byte count) with the tensor's data.
  using TensorFiller = std::function<Status(uint8_t* out, size_t n_bytes)>;

  void SetUint32(const std::string& key, uint32_t v);
  void SetInt32(const std::string& key, int32_t v);
  void SetUint64(const std::string& key, uint64_t v);
  void SetFloat32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& v);
  void SetFloat32Array(const std::string& key, const std::vector<float>& v);
  // A value read from another GGUF file, copied through unchanged.
  void SetValue(const std::string& key, const GgufValue& v);
  // Any value, encoded by the caller (type tag + payload); used by tests for exotic types.
  void SetRaw(const std::string& key, GgufType type, std::string payload);

  // shape in PyTorch order (outermost first); the row length must be block-aligned for `type`.
  Status AddTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                   TensorFiller fill);

  void set_alignment(uint32_t alignment) { alignment_ = alignment; }
  // `inputs` are paths the output must not overwrite.
  Status Write(const std::string& path, const std::vector<std::string>& inputs = {}) const;
  // The whole file in memory (for tests and fuzz seeds).
  StatusOr<std::string> WriteToString() const;

 private:
  struct Kv {
    std::string key;
    GgufType type;
    std::string payload;  // encoded value without the type tag
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    size_t n_bytes;
    TensorFiller fill;
  };
  void Put(const std::string& key, GgufType type, std::string payload);
  std::string EncodeHeader(std::vector<uint64_t>* offsets) const;

  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace pocket
