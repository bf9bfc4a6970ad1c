// Errors as values: every fallible operation returns Status or StatusOr<T>. Messages are meant for
// the user and name the problem (file, tensor, field, position).
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/str.h"

namespace pocket {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something wrong (bad flag, id out of range)
  kNotFound = 2,            // a file, tensor or key that must exist does not
  kDataLoss = 3,            // a file is corrupt or truncated
  kUnimplemented = 4,       // valid input we do not support (tensor type, architecture)
  kOutOfRange = 5,          // a prompt longer than the context, a position past the cache
  kResourceExhausted = 6,   // allocation failed, budget exceeded
  kCancelled = 7,           // stopped on request
  kFailedPrecondition = 8,  // the object is not in a state for this call
  kIo = 9,                  // the operating system refused (open, read, mmap, rename)
  kInternal = 10,           // a bug in pocket
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DataLoss: tensor blk.0.attn_q.weight: data ends past the end of the file"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: ` (for adding the file name, say).
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status InvalidArgumentError(const Args&... args) {
  return Status(StatusCode::kInvalidArgument, StrCat(args...));
}
template <typename... Args>
Status NotFoundError(const Args&... args) {
  return Status(StatusCode::kNotFound, StrCat(args...));
}
template <typename... Args>
Status DataLossError(const Args&... args) {
  return Status(StatusCode::kDataLoss, StrCat(args...));
}
template <typename... Args>
Status UnimplementedError(const Args&... args) {
  return Status(StatusCode::kUnimplemented, StrCat(args...));
}
template <typename... Args>
Status OutOfRangeError(const Args&... args) {
  return Status(StatusCode::kOutOfRange, StrCat(args...));
}
template <typename... Args>
Status ResourceExhaustedError(const Args&... args) {
  return Status(StatusCode::kResourceExhausted, StrCat(args...));
}
template <typename... Args>
Status CancelledError(const Args&... args) {
  return Status(StatusCode::kCancelled, StrCat(args...));
}
template <typename... Args>
Status FailedPreconditionError(const Args&... args) {
  return Status(StatusCode::kFailedPrecondition, StrCat(args...));
}
template <typename... Args>
Status IoError(const Args&... args) {
  return Status(StatusCode::kIo, StrCat(args...));
}
template <typename... Args>
Status InternalError(const Args&... args) {
  return Status(StatusCode::kInternal, StrCat(args...));
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : value_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(value_).ok() && "StatusOr built from an OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(value_);
  }
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> value_;
};

}  // namespace pocket

#define POCKET_CONCAT_INNER_(a, b) a##b
#define POCKET_CONCAT_(a, b) POCKET_CONCAT_INNER_(a, b)

#define POCKET_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::pocket::Status pocket_status_ = (expr);        \
    if (!pocket_status_.ok()) return pocket_status_; \
  } while (0)

#define POCKET_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#define POCKET_ASSIGN_OR_RETURN(lhs, expr) \
  POCKET_ASSIGN_OR_RETURN_IMPL_(POCKET_CONCAT_(pocket_statusor_, __LINE__), lhs, expr)
