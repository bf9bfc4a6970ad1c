// The C API's batches (pocket_batch_*: several sessions generating together on one engine).
#include <cstring>
#include <memory>

#include "capi/common.h"
#include "capi/handles.h"
#include "pocket/pocket.h"
#include "runtime/engine.h"

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
  std::unique_ptr<pocket::Engine> engine;
  std::map<int64_t, pocket_session*> sessions{};  // requests submitted and not taken
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
    *out = new pocket_batch{model->model, *pool, std::move(*engine)};
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
    auto submitted = batch->engine->Submit(session->session.get(), prepared->prompt.ids,
                                           prepared->options, TextCallback(on_text, user_data));
    if (!submitted.ok()) return Report(err, submitted.status());
    *id = *submitted;
    batch->sessions[*id] = session;
    return Report(err, pocket::Status::Ok());
  });
}

pocket_status pocket_batch_step(pocket_batch* batch, int32_t* n_active, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (batch == nullptr) return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "batch is NULL");
    auto active = batch->engine->Step();
    if (!active.ok()) return Report(err, active.status());
    if (n_active != nullptr) *n_active = *active;
    return Report(err, pocket::Status::Ok());
  });
}

int pocket_batch_done(const pocket_batch* batch, int64_t id) {
  return batch != nullptr && batch->engine->done(id) ? 1 : 0;
}

pocket_status pocket_batch_take(pocket_batch* batch, int64_t id, pocket_generate_result* result,
                                pocket_error* err) {
  if (result != nullptr) std::memset(result, 0, sizeof(*result));
  return Guard(err, [&]() -> pocket_status {
    if (batch == nullptr) return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "batch is NULL");
    auto r = batch->engine->Take(id);
    if (r.status().code() != pocket::StatusCode::kFailedPrecondition) batch->sessions.erase(id);
    if (!r.ok()) return Report(err, r.status());
    FillResult(*r, result);
    return Report(err, pocket::Status::Ok());
  });
}

}  // extern "C"
