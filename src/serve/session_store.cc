#include "serve/session_store.h"

#include <filesystem>
#include <string>
#include <system_error>

#include "base/output_file.h"
#include "base/str.h"

namespace pocket::serve {
namespace {

std::string SessionPath(const std::string& dir, size_t slot) {
  return StrCat(dir, "/slot-", slot, ".session");
}

}  // namespace

void LoadSessions(const ServeOptions& options, std::vector<std::unique_ptr<Session>>& sessions) {
  int32_t loaded = 0;
  for (size_t i = 0; i < sessions.size(); ++i) {
    const std::string path = SessionPath(options.session_dir, i);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    StatusOr<std::string> r = sessions[i]->Load(path, /*max_user_data_bytes=*/0);
    if (!r.ok()) {
      if (options.log) options.log(StrCat("skipping a saved session: ", r.status().message()));
      continue;
    }
    sessions[i]->ShareWithPrefixCache();
    ++loaded;
  }
  if (options.log && loaded > 0) {
    options.log(StrCat("loaded ", loaded, " sessions from ", options.session_dir));
  }
}

Status SaveSessions(const ServeOptions& options,
                    const std::vector<std::unique_ptr<Session>>& sessions) {
  std::error_code ec;
  if (Status made = CreatePrivateDirectories(options.session_dir); !made.ok()) {
    return IoError("cannot create --session-dir ", options.session_dir, ": ", made.message());
  }
  int32_t saved = 0;
  for (size_t i = 0; i < sessions.size(); ++i) {
    const std::string path = SessionPath(options.session_dir, i);
    if (sessions[i]->history().empty() || !sessions[i]->adapters().empty() ||
        !sessions[i]->cache_salt().empty()) {
      std::filesystem::remove(path, ec);  // not a context of an older run either
      continue;
    }
    POCKET_RETURN_IF_ERROR(sessions[i]->Save(path));
    ++saved;
  }
  if (options.log) options.log(StrCat("saved ", saved, " sessions to ", options.session_dir));
  return Status::Ok();
}

}  // namespace pocket::serve
