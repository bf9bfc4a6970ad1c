#include "capi/common.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "pocket/pocket.h"

#ifndef POCKET_BUILDING_LIBRARY
#error "src/capi/CMakeLists.txt defines POCKET_BUILDING_LIBRARY (POCKET_API exports, not imports)"
#endif

namespace pocket::capi {

pocket_status Fail(pocket_error* err, pocket_status code, const std::string& message) {
  if (err != nullptr) {
    err->code = code;
    std::snprintf(err->message, sizeof(err->message), "%s", message.c_str());
  }
  return code;
}

pocket_status Report(pocket_error* err, const Status& s) {
  if (s.ok()) {
    if (err != nullptr) {
      err->code = POCKET_OK;
      err->message[0] = '\0';
    }
    return POCKET_OK;
  }
  return Fail(err, static_cast<pocket_status>(static_cast<int>(s.code())), s.message());
}

Status CheckPathExists(const char* path, std::string_view what) {
  struct stat st {};
  if (path == nullptr || ::stat(path, &st) == 0) return Status::Ok();
  if (errno == ENOENT || errno == ENOTDIR) {
    return NotFoundError(what, " ", path, ": no such file or directory");
  }
  return Status::Ok();
}

}  // namespace pocket::capi

extern "C" {

const char* pocket_version(void) {
  return POCKET_VERSION_STRING;
}

const char* pocket_status_name(pocket_status status) {
  if (status == POCKET_ERR_BUFFER_TOO_SMALL) return "BufferTooSmall";
  // The names are string literals, so the view's data is NUL-terminated.
  return pocket::StatusCodeName(static_cast<pocket::StatusCode>(status)).data();
}

}  // extern "C"
