// What both C libraries (libpocket.so, libpocket_voice.so) hold: pocket_version and
// pocket_status_name (exported by both, so that an app using only pocket_voice.h links
// libpocket_voice alone), and the rule for paths that do not exist.
#pragma once

#include <new>
#include <string>
#include <string_view>

#include "base/status.h"
#include "pocket/pocket.h"

namespace pocket::capi {

// The error helpers of both C libraries. Fail: `code` with `message` in *err (when err is not
// NULL), returned. Report: a Status as a pocket_status (the codes are the same numbers), OK
// clearing *err.
pocket_status Fail(pocket_error* err, pocket_status code, const std::string& message);
pocket_status Report(pocket_error* err, const Status& s);

// Runs fn, turning any escaping exception (allocation failure, a bug) into an error value: no
// exception crosses the C API.
template <typename Fn>
pocket_status Guard(pocket_error* err, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Fail(err, POCKET_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(err, POCKET_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return Fail(err, POCKET_ERR_INTERNAL, "internal error");
  }
}

// NotFound naming `what` and `path` when nothing is there (the path or a directory on it does not
// exist); OK otherwise, leaving other failures to the loader (a file that exists but cannot be
// read is Io there).
Status CheckPathExists(const char* path, std::string_view what);

}  // namespace pocket::capi
