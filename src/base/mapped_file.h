// A read-only memory-mapped file. Weights are used in place from the mapping (zero copy), so a
// model's resident memory is the pages actually touched, shared between processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace pocket {

class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Tells the OS that the mapped pages inside [begin, begin + n_bytes) are no longer needed (the
// source of weights repacked elsewhere), so they leave the resident set. Only whole pages inside
// the range are released; reading them again later is valid (they are re-read from the file).
void ReleaseMappedPages(const void* begin, size_t n_bytes);

// Asks the OS to back the whole pages inside [begin, begin + n_bytes) with huge pages where it
// can (Linux: transparent huge pages, MADV_HUGEPAGE; anonymous memory and, on file systems with
// large folios, mapped files). Weights that every decode step streams then cost far fewer TLB
// misses. A no-op where unsupported; never an error.
void AdviseHugePages(const void* begin, size_t n_bytes);
// The huge page size AdviseHugePages aims at (2 MB on x86-64 and on ARM64 with 4 KB pages).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whole-file read into memory (for small files: config.json, tokenizer.bin).
StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to `path` by writing a temporary file beside it and renaming it into place, so
// a failure never leaves a partial file and a reader never sees one. `inputs`: files the tool read,
// never to be overwritten (OutputFile::Create).
Status WriteFileAtomically(const std::string& path, std::string_view contents,
                           const std::vector<std::string>& inputs = {});

bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace pocket
