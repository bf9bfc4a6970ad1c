// Bounds-checked little-endian reads from a byte span. Every parser of untrusted files reads
// through this, so a truncated or corrupt file is an error value, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "base/status.h"

namespace pocket {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string_view what)
      : data_(data), size_(size), what_(what) {}

  size_t offset() const { return offset_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - offset_; }
  const uint8_t* data() const { return data_; }
  std::string_view what() const { return what_; }

  template <typename T>
  Status Read(T* out, std::string_view field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return Truncated(field, sizeof(T));
    std::memcpy(out, data_ + offset_, sizeof(T));  // files are little-endian, as are our targets
    offset_ += sizeof(T);
    return Status::Ok();
  }

  // A view of the next n bytes (no copy).
  Status ReadBytes(size_t n, const uint8_t** out, std::string_view field) {
    if (remaining() < n) return Truncated(field, n);
    *out = data_ + offset_;
    offset_ += n;
    return Status::Ok();
  }

  Status Skip(size_t n, std::string_view field) {
    if (remaining() < n) return Truncated(field, n);
    offset_ += n;
    return Status::Ok();
  }

  Status Seek(size_t offset, std::string_view field) {
    if (offset > size_) {
      return DataLossError(what_, ": ", field, " at offset ", offset, " is past the end (", size_,
                           " bytes)");
    }
    offset_ = offset;
    return Status::Ok();
  }

  Status Truncated(std::string_view field, size_t needed) const {
    return DataLossError(what_, ": truncated: reading ", field, " at offset ", offset_, " needs ",
                         needed, " bytes, only ", remaining(), " remain");
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
  std::string_view what_;
};

}  // namespace pocket
