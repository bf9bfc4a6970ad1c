// What both C libraries (libpocket.so, libpocket_voice.so) hold: pocket_version and
// pocket_status_name (exported by both, so that an app using only pocket_voice.h links
// libpocket_voice alone), and the rule for paths that do not exist.
#pragma once

#include <string_view>

#include "base/status.h"

namespace pocket::capi {

// NotFound naming `what` and `path` when nothing is there (the path or a directory on it does not
// exist); OK otherwise, leaving other failures to the loader (a file that exists but cannot be
// read is Io there).
Status CheckPathExists(const char* path, std::string_view what);

}  // namespace pocket::capi
