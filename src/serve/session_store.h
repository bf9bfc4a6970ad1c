// pocket serve --session-dir: each slot's context saved at exit and offered to the prefix cache at
// the next start.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "runtime/session.h"
#include "serve/server.h"

namespace pocket::serve {

// The contexts a previous run saved (SaveSessions), one per slot, offered to the prefix cache. A
// file that does not load (another model, a context too small, damage) is skipped with a line in
// the log: the server starts either way.
void LoadSessions(const ServeOptions& options, std::vector<std::unique_ptr<Session>>& sessions);

// Each slot's context, with the base model's weights (a session an adapter served last is not
// saved: its conversation is the adapter's; nor one a request with a cache_salt served last: the
// files load under no salt), or no file when it holds none.
Status SaveSessions(const ServeOptions& options,
                    const std::vector<std::unique_ptr<Session>>& sessions);

}  // namespace pocket::serve
