#include "base/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/str.h"

namespace pocket {

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

namespace {

Status Refuse(const std::string& output, const std::string& input) {
  return InvalidArgumentError("output ", output, " is the input file ", input,
                              "; refusing to overwrite the input");
}

}  // namespace

Status CheckNotAnInput(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat out {};
  if (::stat(output.c_str(), &out) != 0) return Status::Ok();  // nothing there to overwrite
  auto is_output = [&out](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino;
  };
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    if (is_output(input)) return Refuse(output, input);
    struct stat in {};
    if (::stat(input.c_str(), &in) != 0) continue;
    if (S_ISDIR(in.st_mode)) {
      DIR* dir = ::opendir(input.c_str());
      if (dir == nullptr) continue;
      Status s = Status::Ok();
      while (const dirent* e = ::readdir(dir)) {
        const std::string name = e->d_name;
        if (!EndsWith(name, ".json") && !EndsWith(name, ".safetensors")) continue;
        const std::string file = input + "/" + name;
        if (is_output(file)) {
          s = Refuse(output, file);
          break;
        }
      }
      ::closedir(dir);
      POCKET_RETURN_IF_ERROR(s);
    } else if (EndsWith(input, ".json")) {
      const size_t slash = input.find_last_of('/');
      const std::string config =
          (slash == std::string::npos ? std::string() : input.substr(0, slash + 1)) +
          "tokenizer_config.json";
      if (is_output(config)) return Refuse(output, config);
    }
  }
  return Status::Ok();
}

StatusOr<OutputFile> OutputFile::Create(const std::string& path,
                                        const std::vector<std::string>& inputs, uint32_t mode) {
  if (path.empty()) return InvalidArgumentError("output path is empty");
  POCKET_RETURN_IF_ERROR(CheckNotAnInput(path, inputs));
  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = ::mkstemp(buf.data());
  if (fd < 0)
    return IoError("cannot create a temporary file beside ", path, ": ", std::strerror(errno));
  // mkstemp makes it 0600; fchmod (not the umask) sets what the caller asked for.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(buf.data());
    return IoError("cannot set the permissions of ", buf.data(), ": ", std::strerror(err));
  }
  return OutputFile(path, std::string(buf.data()), fd);
}

Status CreatePrivateDirectories(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("directory path is empty");
  // Each missing component from the top, so every directory made here is private.
  size_t at = dir[0] == '/' ? 1 : 0;
  while (at <= dir.size()) {
    size_t slash = dir.find('/', at);
    if (slash == std::string::npos) slash = dir.size();
    const std::string part = dir.substr(0, slash);
    at = slash + 1;
    if (part.empty() || part.back() == '/') continue;
    struct stat st {};
    if (::stat(part.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return IoError(part, " is not a directory");
      continue;
    }
    if (::mkdir(part.c_str(), static_cast<mode_t>(kPrivateDirMode)) != 0 && errno != EEXIST) {
      return IoError("cannot create the directory ", part, ": ", std::strerror(errno));
    }
    // mkdir applies the umask (which can only take bits away from 0700): set it exactly.
    if (::chmod(part.c_str(), static_cast<mode_t>(kPrivateDirMode)) != 0) {
      return IoError("cannot set the permissions of ", part, ": ", std::strerror(errno));
    }
  }
  return Status::Ok();
}

StatusOr<std::string> MakePrivateTempDirectory(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string tmpl = base + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {  // mkdtemp makes it 0700
    return IoError("cannot create a private directory in ", base, ": ", std::strerror(errno));
  }
  return std::string(buf.data());
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      fd_(other.fd_),
      bytes_written_(other.bytes_written_) {
  other.fd_ = -1;
  other.tmp_path_.clear();
}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    fd_ = other.fd_;
    bytes_written_ = other.bytes_written_;
    other.fd_ = -1;
    other.tmp_path_.clear();
  }
  return *this;
}

OutputFile::~OutputFile() {
  Abandon();
}

void OutputFile::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
  tmp_path_.clear();
}

Status OutputFile::Write(const void* data, size_t n_bytes) {
  if (fd_ < 0) return FailedPreconditionError("output file ", path_, " is closed");
  const char* p = static_cast<const char*>(data);
  while (n_bytes > 0) {
    ssize_t n = ::write(fd_, p, n_bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write ", tmp_path_, ": ", std::strerror(errno));
    }
    p += n;
    n_bytes -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status OutputFile::WriteAt(uint64_t offset, const void* data, size_t n_bytes) {
  if (fd_ < 0) return FailedPreconditionError("output file ", path_, " is closed");
  if (offset + n_bytes > bytes_written_) {
    return InternalError("WriteAt past the written end of ", tmp_path_);
  }
  const char* p = static_cast<const char*>(data);
  while (n_bytes > 0) {
    ssize_t n = ::pwrite(fd_, p, n_bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write ", tmp_path_, ": ", std::strerror(errno));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    n_bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status OutputFile::WriteZeros(size_t n_bytes) {
  static const char kZeros[256] = {};
  while (n_bytes > 0) {
    size_t n = n_bytes < sizeof(kZeros) ? n_bytes : sizeof(kZeros);
    POCKET_RETURN_IF_ERROR(Write(kZeros, n));
    n_bytes -= n;
  }
  return Status::Ok();
}

Status OutputFile::Commit(bool drop_from_page_cache) {
  if (fd_ < 0) return FailedPreconditionError("output file ", path_, " is closed");
  if (::fsync(fd_) != 0 && errno != EINVAL) {
    return IoError("cannot flush ", tmp_path_, ": ", std::strerror(errno));
  }
#if defined(__linux__) && defined(POSIX_FADV_DONTNEED)
  if (drop_from_page_cache) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);  // advice only
#else
  (void)drop_from_page_cache;
#endif
  if (::close(fd_) != 0) {
    fd_ = -1;
    return IoError("cannot close ", tmp_path_, ": ", std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return IoError("cannot rename ", tmp_path_, " to ", path_, ": ", std::strerror(errno));
  }
  tmp_path_.clear();
  return Status::Ok();
}

}  // namespace pocket
