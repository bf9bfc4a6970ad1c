#include "base/status.h"

namespace pocket {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kIo:
      return "Io";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return StrCat(StatusCodeName(code_), ": ", message_);
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, StrCat(context, ": ", message_));
}

}  // namespace pocket
