// The .pocket package: one file holding a model's configuration, tokenizer, chat template and
// tensors (64-byte aligned, in exactly the layout the kernels consume). Loading maps the file and
// validates the header, the section table and the tensor directory (time independent of model
// size); `Verify` checks every section's CRC-32C, tensor data included. Specified in
// docs/format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "format/hf_directory.h"
#include "format/tensor_info.h"

namespace pocket {

inline constexpr char kPocketMagic[8] = {'P', 'O', 'C', 'K', 'E', 'T', 'P', 'K'};
inline constexpr uint16_t kPocketVersionMajor = 1;
inline constexpr uint16_t kPocketVersionMinor = 0;

struct PocketSection {
  std::string name;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc32c = 0;
  bool required = false;
};

class PocketFile {
 public:
  static StatusOr<std::unique_ptr<PocketFile>> Open(const std::string& path);
  // Parses caller-owned bytes (which must outlive the result).
  static StatusOr<std::unique_ptr<PocketFile>> Parse(const uint8_t* data, size_t size,
                                                     std::string name);
  static bool LooksLikePocket(const uint8_t* data, size_t size);

  const std::string& name() const { return name_; }
  uint16_t version_major() const { return version_major_; }
  uint16_t version_minor() const { return version_minor_; }
  size_t file_bytes() const { return size_; }
  const std::vector<PocketSection>& sections() const { return sections_; }
  // The bytes of a section, or an empty view when the file has none of that name.
  std::string_view Section(std::string_view name) const;
  // The "meta" section: a JSON object's top level.
  const std::map<std::string, ConfigValue>& metadata() const { return metadata_; }
  const ConfigValue* Find(const std::string& key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // Checks the CRC-32C of every section (the whole file); errors name the section.
  Status Verify() const;

 private:
  PocketFile() = default;
  Status ParseAll();
  Status ParseDirectory(std::string_view dir, uint64_t data_offset, uint64_t data_size);

  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  uint16_t version_major_ = 0, version_minor_ = 0;
  std::vector<PocketSection> sections_;
  std::map<std::string, ConfigValue> metadata_;
  std::vector<TensorInfo> tensors_;
};

// Writes a .pocket file: sections added in order, tensors produced one at a time by callbacks
// while writing (so a large model never sits in memory), to a temporary file renamed at the end.
class PocketWriter {
 public:
  using TensorFiller = std::function<Status(uint8_t* out, size_t n_bytes)>;

  void SetMetadataJson(std::string json) { meta_json_ = std::move(json); }
  // Optional sections: "tokenizer", "chat_template", or any name (readers skip unknown optional
  // sections; `required` ones make readers that do not know them refuse the file).
  void AddSection(const std::string& name, std::string bytes, bool required = false);
  Status AddDenseTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                        TensorFiller fill);
  Status AddPackedTensor(const std::string& name, const PackedLayout& layout, TensorFiller fill);
  // Called after each tensor is written: (tensors done, total, name).
  void set_progress(std::function<void(size_t, size_t, const std::string&)> progress) {
    progress_ = std::move(progress);
  }
  Status Write(const std::string& path, const std::vector<std::string>& inputs = {}) const;

 private:
  struct Tensor {
    TensorInfo info;
    TensorFiller fill;
  };
  std::string EncodeDirectory(std::vector<uint64_t>* offsets, uint64_t* data_size) const;

  std::string meta_json_ = "{}";
  std::vector<std::pair<PocketSection, std::string>> extra_;
  std::vector<Tensor> tensors_;
  std::function<void(size_t, size_t, const std::string&)> progress_;
};

}  // namespace pocket
