// The C API's handles (what pocket_model, pocket_adapter and pocket_session hold) and the parts of
// pocket_generate that pocket_batch_submit shares (pocket_c.cc, batch_c.cc).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "generate/drafter.h"
#include "model/adapter.h"
#include "pocket/pocket.h"
#include "runtime/request.h"
#include "runtime/session.h"

struct pocket_model {
  std::shared_ptr<const pocket::Model> model;
  // Sessions of one model share one thread pool per thread count (kept while a session uses it).
  mutable std::mutex pools_mutex{};
  mutable std::map<int32_t, std::weak_ptr<pocket::ThreadPool>> pools{};
};

struct pocket_adapter {
  std::shared_ptr<const pocket::LoraAdapter> adapter;
  const pocket::Model* model = nullptr;
  std::string targets{};
};

struct pocket_session {
  std::unique_ptr<pocket::Session> session;
  std::shared_ptr<pocket::ThreadPool> pool{};  // the session's (a drafter computes on it too)
  // The drafter of the last call with a spec, kept for later calls with the same spec.
  std::string spec{};
  int32_t draft_branches = 1;
  std::unique_ptr<pocket::Drafter> drafter{};
};

namespace pocket::capi {

// pocket_generate's request: `params` read and checked, the prompt or messages encoded, the
// constraint compiled, the drafter made (or kept) when params->spec asks for one.
StatusOr<PreparedRequest> PrepareGenerate(pocket_session* session, const char* prompt,
                                          const pocket_generate_params* params);
StreamCallback TextCallback(pocket_text_callback on_text, void* user_data);
void FillResult(const GenerateResult& r, pocket_generate_result* result);
// The thread pool the sessions of `model` with `n_threads` share (made when none is alive).
StatusOr<std::shared_ptr<ThreadPool>> SharedPool(const pocket_model* model, int32_t n_threads);

}  // namespace pocket::capi
