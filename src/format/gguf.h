// GGUF v2/v3 reader (llama.cpp's model file): metadata key/values of every type, including nested
// arrays, and the tensor directory. Tensors are views into the mapped file. Every count, length,
// offset and shape is validated, so a corrupt or truncated file is a clear error, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "format/tensor_info.h"

namespace pocket {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufTypeName(GgufType type);

// ggml tensor type ids as stored in GGUF.
inline constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8,
                          kGgmlQ4_K = 12, kGgmlQ6_K = 14, kGgmlBF16 = 30;
// Our DType for a ggml type id; false for types pocket does not support.
bool DTypeFromGgml(uint32_t ggml_type, DType* out);
uint32_t GgmlTypeOf(DType type);
// "q5_K", or "type 99" for ids unknown to ggml as well.
std::string GgmlTypeName(uint32_t ggml_type);

struct GgufValue {
  GgufType type = GgufType::kUint8;
  // Scalars: integers in i (signed) / u (unsigned), floats in f, bool in b, strings in s.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  bool b = false;
  std::string_view s;
  // Arrays: elem_type and count; numeric elements stay in the file (elems, little-endian,
  // possibly unaligned); strings are listed in `strings`; nested arrays in `children`.
  GgufType elem_type = GgufType::kUint8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> children;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  // Element i of a numeric array as double / int64 (caller checks the index and type).
  double ArrayFloat(uint64_t index) const;
  int64_t ArrayInt(uint64_t index) const;
};

class GgufFile {
 public:
  // Maps and parses the file.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (which must outlive the result); `name` is used in messages.
  static StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* data, size_t size,
                                                   std::string name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& name() const { return name_; }
  size_t file_bytes() const { return size_; }

  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // Typed getters: NotFound when absent, InvalidArgument naming the key on a type mismatch.
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;  // accepts integers too
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<const GgufValue*> GetArray(std::string_view key, GgufType elem_type) const;

 private:
  GgufFile() = default;
  Status ParseAll();
  Status ParseValue(class ByteReader& r, GgufType type, GgufValue* out, int depth,
                    std::string_view key);

  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GgufValue>> kv_;  // keys view the file
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace pocket
