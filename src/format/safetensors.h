// safetensors (Hugging Face): an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
// Supported dtypes: F32, F16, BF16. Reader validates every entry against the file size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "format/tensor_info.h"

namespace pocket {

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses caller-owned bytes (which must outlive the result).
  static StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const uint8_t* data, size_t size,
                                                          std::string name);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& name() const { return name_; }
  size_t file_bytes() const { return size_; }

 private:
  SafetensorsFile() = default;
  Status ParseAll();
  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  using TensorFiller = std::function<Status(uint8_t* out, size_t n_bytes)>;
  // type: F32, F16 or BF16. shape outermost first.
  Status AddTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                   TensorFiller fill);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // `inputs`: files the tool read, never to be overwritten (OutputFile::Create).
  Status Write(const std::string& path, const std::vector<std::string>& inputs = {}) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    size_t n_bytes;
    TensorFiller fill;
  };
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace pocket
