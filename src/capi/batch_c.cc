// The C API's batches (pocket_batch_*: several sessions generating together): the runtime's
// Scheduler with no slots, each request on its caller's session, stepped by the app's thread.
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "base/str.h"
#include "capi/common.h"
#include "capi/handles.h"
#include "pocket/pocket.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

#ifndef POCKET_BUILDING_LIBRARY
#error "src/capi/CMakeLists.txt defines POCKET_BUILDING_LIBRARY (POCKET_API exports, not imports)"
#endif

using pocket::capi::Fail;
using pocket::capi::FillResult;
using pocket::capi::Guard;
using pocket::capi::PrepareGenerate;
using pocket::capi::Report;
using pocket::capi::SharedPool;
using pocket::capi::TextCallback;

extern "C" {

struct pocket_batch {
  std::shared_ptr<const pocket::Model> model;
  std::shared_ptr<pocket::ThreadPool> pool;
  std::unique_ptr<pocket::Scheduler> scheduler;
  int32_t max_requests = 0;
  // Requests submitted and not taken: their results once they end.
  using Outcome = std::optional<pocket::StatusOr<pocket::GenerateResult>>;
  struct Request {
    pocket_session* session = nullptr;  // the request's until it is taken
    std::shared_ptr<Outcome> outcome;
  };
  std::map<int64_t, Request> requests{};
};

pocket_status pocket_batch_create(const pocket_model* model, int32_t n_threads,
                                  int32_t max_requests, int32_t max_chunk, pocket_batch** out,
                                  pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model == nullptr || out == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    }
    *out = nullptr;
    auto pool = SharedPool(model, n_threads);
    if (!pool.ok()) return Report(err, pool.status());
    pocket::EngineOptions eo;
    eo.max_requests = max_requests > 0 ? max_requests : 8;
    eo.max_chunk = max_chunk > 0 ? max_chunk : 512;
    auto engine = pocket::Engine::Create(model->model, *pool, eo);
    if (!engine.ok()) return Report(err, engine.status());
    auto scheduler = std::make_unique<pocket::Scheduler>(
        std::move(*engine), std::vector<std::unique_ptr<pocket::Session>>{});
    *out = new pocket_batch{model->model, *pool, std::move(scheduler), eo.max_requests};
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_batch_free(pocket_batch* batch) {
  delete batch;
}

pocket_status pocket_batch_submit(pocket_batch* batch, pocket_session* session, const char* prompt,
                                  const pocket_generate_params* params,
                                  pocket_text_callback on_text, void* user_data, int64_t* id,
                                  pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (batch == nullptr || session == nullptr || id == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "batch, session and id must not be NULL");
    }
    if (session->pool != batch->pool) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "the session computes on other threads than the batch: create both with the "
                  "same model and n_threads");
    }
    auto prepared = PrepareGenerate(session, prompt, params);
    if (!prepared.ok()) return Report(err, prepared.status());
    if (prepared->options.drafter != nullptr) {
      return Fail(err, POCKET_ERR_UNIMPLEMENTED,
                  "speculative decoding (params.spec) is not batched: use pocket_generate");
    }
    for (const auto& [other, r] : batch->requests) {
      if (r.session == session) {
        return Fail(err, POCKET_ERR_FAILED_PRECONDITION,
                    pocket::StrCat("the session is in request ", other,
                                   " already (pocket_batch_take it first)"));
      }
    }
    if (batch->scheduler->running() >= batch->max_requests) {
      return Fail(err, POCKET_ERR_RESOURCE_EXHAUSTED,
                  pocket::StrCat("the batch is full (", batch->max_requests, " requests)"));
    }
    auto outcome = std::make_shared<pocket_batch::Outcome>();
    pocket::SchedulerRequest request;
    request.session = session->session.get();
    request.prompt = std::move(prepared->prompt.ids);
    request.options = prepared->options;
    request.on_text = TextCallback(on_text, user_data);
    request.on_generated = [outcome](pocket::StatusOr<pocket::GenerateResult> r) {
      outcome->emplace(std::move(r));
      return std::optional<pocket::SchedulerFollowUp>();
    };
    auto submitted = batch->scheduler->Submit(std::move(request));
    if (!submitted.ok()) return Report(err, submitted.status());
    // Admitted at once, so that what the engine refuses (a session in another request, a prompt
    // longer than the context) is this call's error and the session is the request's from here.
    batch->scheduler->Admit();
    if (outcome->has_value() && !(*outcome)->ok()) return Report(err, (*outcome)->status());
    *id = *submitted;
    batch->requests[*id] = {session, std::move(outcome)};
    return Report(err, pocket::Status::Ok());
  });
}

pocket_status pocket_batch_step(pocket_batch* batch, int32_t* n_active, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (batch == nullptr) return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "batch is NULL");
    const int32_t active = batch->scheduler->Step();
    if (n_active != nullptr) *n_active = active;
    return Report(err, pocket::Status::Ok());
  });
}

int pocket_batch_done(const pocket_batch* batch, int64_t id) {
  if (batch == nullptr) return 0;
  const auto it = batch->requests.find(id);
  return it != batch->requests.end() && it->second.outcome->has_value() ? 1 : 0;
}

pocket_status pocket_batch_take(pocket_batch* batch, int64_t id, pocket_generate_result* result,
                                pocket_error* err) {
  if (result != nullptr) std::memset(result, 0, sizeof(*result));
  return Guard(err, [&]() -> pocket_status {
    if (batch == nullptr) return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "batch is NULL");
    const auto it = batch->requests.find(id);
    if (it == batch->requests.end()) {
      return Fail(err, POCKET_ERR_NOT_FOUND,
                  pocket::StrCat("no request ", id, " in the batch (taken already?)"));
    }
    if (!it->second.outcome->has_value()) {
      return Fail(err, POCKET_ERR_FAILED_PRECONDITION,
                  pocket::StrCat("request ", id, " is still running"));
    }
    const pocket::StatusOr<pocket::GenerateResult> r = std::move(**it->second.outcome);
    batch->requests.erase(it);
    if (!r.ok()) return Report(err, r.status());
    FillResult(*r, result);
    return Report(err, pocket::Status::Ok());
  });
}

}  // extern "C"
