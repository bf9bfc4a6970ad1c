// pocket_version and pocket_status_name, compiled into both C libraries (libpocket.so,
// libpocket_voice.so) so that an app using only pocket_voice.h links libpocket_voice alone.
#include "pocket/pocket.h"

#include "base/status.h"

#ifndef POCKET_BUILDING_LIBRARY
#error "src/capi/CMakeLists.txt defines POCKET_BUILDING_LIBRARY (POCKET_API exports, not imports)"
#endif

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
