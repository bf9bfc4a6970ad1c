// An output file written to `PATH.tmp.XXXXXX` and renamed to PATH by Commit(). Destroying it
// without Commit() removes the temporary, so a failed tool leaves no partial output. Refuses to
// write over a file the tool reads (the caller passes every input path: model, tokenizer,
// corpora, ...; see CheckNotAnInput).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace pocket {

class OutputFile {
 public:
  // `inputs`: paths the tool reads; writing over one of them is refused (CheckNotAnInput).
  // `mode`: the file's permissions whatever the umask (kPrivateFileMode for a user's data).
  static StatusOr<OutputFile> Create(const std::string& path,
                                     const std::vector<std::string>& inputs = {},
                                     uint32_t mode = 0644);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  Status Write(const void* data, size_t n_bytes);
  // Overwrites bytes already written (headers whose checksums are known only at the end).
  Status WriteAt(uint64_t offset, const void* data, size_t n_bytes);
  Status WriteZeros(size_t n_bytes);
  uint64_t bytes_written() const { return bytes_written_; }
  // Flushes, closes and renames into place. With `drop_from_page_cache`, the written pages are
  // also dropped from the OS page cache once on disk (Linux), so the next reader maps the file
  // fresh: the page cache then holds it in the folios readahead picks (huge pages under
  // MADV_HUGEPAGE) rather than in the small ones the writes left.
  Status Commit(bool drop_from_page_cache = false);

 private:
  OutputFile(std::string path, std::string tmp_path, int fd)
      : path_(std::move(path)), tmp_path_(std::move(tmp_path)), fd_(fd) {}
  void Abandon();
  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  uint64_t bytes_written_ = 0;
};

// Files that hold a user's conversation (sessions, swapped sessions) and their directories.
inline constexpr uint32_t kPrivateFileMode = 0600;
inline constexpr uint32_t kPrivateDirMode = 0700;

// Creates `dir` and its missing parents, those it creates with kPrivateDirMode whatever the
// umask (an existing directory keeps its permissions: it is the user's).
Status CreatePrivateDirectories(const std::string& dir);

// A new private directory (kPrivateDirMode) under the system's temporary directory ($TMPDIR or
// /tmp) whose name starts with `prefix` and ends in random characters.
StatusOr<std::string> MakePrivateTempDirectory(const std::string& prefix);

// True when a and b name the same existing file (same device and inode).
bool SameFile(const std::string& a, const std::string& b);

// InvalidArgument naming both files when `output` is one of `inputs`: the same file by device and
// inode, so a hard link or a symbolic link to an input is caught as well as the input's own name.
// An input that is a directory (a Hugging Face model) stands for the model files directly in it
// (*.json, *.safetensors); an input *.json (tokenizer.json) also for the tokenizer_config.json
// read beside it. Tools call it before their work too, so a refusal comes before a long load.
Status CheckNotAnInput(const std::string& output, const std::vector<std::string>& inputs);

}  // namespace pocket
