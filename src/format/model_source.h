// Opens whatever model a user points at: a GGUF file, a .pocket package, a Hugging Face directory
// or a llama2.c checkpoint, and exposes its tensors by name (in place, zero copy) plus the
// format-specific metadata for the config builder.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"
#include "format/hf_directory.h"
#include "format/llama2c.h"
#include "format/pocket_file.h"

namespace pocket {

enum class SourceKind { kGguf, kHfDirectory, kLlama2c, kPocket };

std::string_view SourceKindName(SourceKind kind);

class ModelSource {
 public:
  static StatusOr<std::unique_ptr<ModelSource>> Open(const std::string& path);

  SourceKind kind() const { return kind_; }
  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return *tensors_; }
  const TensorInfo* FindTensor(const std::string& name) const;
  // Bytes of the model files on disk.
  uint64_t file_bytes() const { return file_bytes_; }

  const GgufFile* gguf() const { return gguf_.get(); }
  const HfDirectory* hf() const { return hf_.get(); }
  const Llama2cCheckpoint* llama2c() const { return llama2c_.get(); }
  const PocketFile* pocket() const { return pocket_.get(); }

 private:
  ModelSource() = default;
  void Index();
  SourceKind kind_ = SourceKind::kGguf;
  std::string path_;
  uint64_t file_bytes_ = 0;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<HfDirectory> hf_;
  std::unique_ptr<Llama2cCheckpoint> llama2c_;
  std::unique_ptr<PocketFile> pocket_;
  const std::vector<TensorInfo>* tensors_ = nullptr;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace pocket
