// The C API over the C++ API. Nothing throws across it: every entry point catches and converts.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>

#include "capi/chat_prompt.h"
#include "capi/common.h"
#include "capi/handles.h"
#include "capi/params.h"
#include "model/adapter.h"
#include "pocket/pocket.h"
#include "runtime/candidates.h"
#include "runtime/engine.h"
#include "runtime/request.h"
#include "runtime/session.h"

#ifndef POCKET_BUILDING_LIBRARY
#error "src/capi/CMakeLists.txt defines POCKET_BUILDING_LIBRARY (POCKET_API exports, not imports)"
#endif

namespace {

using pocket::capi::Fail;
using pocket::capi::Guard;
using pocket::capi::Report;

// Only ASCII whitespace (or nothing), as MakeConstraint's rule for a blank constraint.
bool Blank(std::string_view text) {
  return text.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}

// A constraint string the caller gave (non-NULL) must say something: an empty or blank one is an
// error naming `field`, never read as "no constraint" (NULL is the way to give none).
pocket::Status CheckConstraintText(const char* text, const std::string& field) {
  if (text == nullptr) return pocket::Status::Ok();
  if (text[0] == '\0') {
    return pocket::InvalidArgumentError(
        field, " is empty: an empty constraint would constrain nothing; pass NULL for none");
  }
  if (Blank(text)) {
    return pocket::InvalidArgumentError(
        field, " is blank (only whitespace): refused as a likely mistake; pass NULL for none");
  }
  return pocket::Status::Ok();
}

// The constraint fields of `p`: choices present when counted and each one real text; regex,
// json_schema and grammar NULL or not blank.
pocket::Status CheckConstraintFields(const pocket_generate_params& p) {
  if (p.n_choices > 0 && p.choices == nullptr) {
    return pocket::InvalidArgumentError("choices is NULL but n_choices is ", p.n_choices,
                                        ": pass the strings, or n_choices = 0 for none");
  }
  for (size_t i = 0; i < p.n_choices; ++i) {
    const std::string field = "choices[" + std::to_string(i) + "]";
    if (p.choices[i] == nullptr) return pocket::InvalidArgumentError(field, " is NULL");
    if (p.choices[i][0] == '\0') {
      return pocket::InvalidArgumentError(
          field, " is empty: the output would be allowed to be empty; every choice is some text");
    }
    if (Blank(p.choices[i])) {
      return pocket::InvalidArgumentError(
          field, " is blank (only whitespace): every choice is some visible text");
    }
  }
  POCKET_RETURN_IF_ERROR(CheckConstraintText(p.regex, "regex"));
  POCKET_RETURN_IF_ERROR(CheckConstraintText(p.json_schema, "json_schema"));
  POCKET_RETURN_IF_ERROR(CheckConstraintText(p.grammar, "grammar"));
  return pocket::Status::Ok();
}

// The parameter structs' fields after struct_size, in order (capi/params.h), and the library's
// defaults for them.
using pocket::capi::ListsEveryField;
constexpr std::array kModelFields{POCKET_CAPI_FIELD(pocket_model_params, tokenizer_path)};
constexpr std::array kSessionFields{POCKET_CAPI_FIELD(pocket_session_params, n_ctx),
                                    POCKET_CAPI_FIELD(pocket_session_params, n_batch),
                                    POCKET_CAPI_FIELD(pocket_session_params, n_threads)};
constexpr std::array kGenerateFields{POCKET_CAPI_FIELD(pocket_generate_params, max_tokens),
                                     POCKET_CAPI_FIELD(pocket_generate_params, temperature),
                                     POCKET_CAPI_FIELD(pocket_generate_params, top_k),
                                     POCKET_CAPI_FIELD(pocket_generate_params, top_p),
                                     POCKET_CAPI_FIELD(pocket_generate_params, min_p),
                                     POCKET_CAPI_FIELD(pocket_generate_params, repetition_penalty),
                                     POCKET_CAPI_FIELD(pocket_generate_params, presence_penalty),
                                     POCKET_CAPI_FIELD(pocket_generate_params, frequency_penalty),
                                     POCKET_CAPI_FIELD(pocket_generate_params, seed),
                                     POCKET_CAPI_FIELD(pocket_generate_params, stop_strings),
                                     POCKET_CAPI_FIELD(pocket_generate_params, n_stop_strings),
                                     POCKET_CAPI_FIELD(pocket_generate_params, choices),
                                     POCKET_CAPI_FIELD(pocket_generate_params, n_choices),
                                     POCKET_CAPI_FIELD(pocket_generate_params, regex),
                                     POCKET_CAPI_FIELD(pocket_generate_params, json_schema),
                                     POCKET_CAPI_FIELD(pocket_generate_params, grammar),
                                     POCKET_CAPI_FIELD(pocket_generate_params, span_source),
                                     POCKET_CAPI_FIELD(pocket_generate_params, messages),
                                     POCKET_CAPI_FIELD(pocket_generate_params, n_messages),
                                     POCKET_CAPI_FIELD(pocket_generate_params, enable_thinking),
                                     POCKET_CAPI_FIELD(pocket_generate_params, parse_special),
                                     POCKET_CAPI_FIELD(pocket_generate_params, spec),
                                     POCKET_CAPI_FIELD(pocket_generate_params, draft_max),
                                     POCKET_CAPI_FIELD(pocket_generate_params, draft_min),
                                     POCKET_CAPI_FIELD(pocket_generate_params, draft_p_min),
                                     POCKET_CAPI_FIELD(pocket_generate_params, draft_branches)};
constexpr std::array kScoreFields{POCKET_CAPI_FIELD(pocket_score_params, messages),
                                  POCKET_CAPI_FIELD(pocket_score_params, n_messages),
                                  POCKET_CAPI_FIELD(pocket_score_params, enable_thinking),
                                  POCKET_CAPI_FIELD(pocket_score_params, parse_special)};
constexpr std::array kClassifyFields{POCKET_CAPI_FIELD(pocket_classify_params, messages),
                                     POCKET_CAPI_FIELD(pocket_classify_params, n_messages),
                                     POCKET_CAPI_FIELD(pocket_classify_params, enable_thinking),
                                     POCKET_CAPI_FIELD(pocket_classify_params, parse_special)};
static_assert(ListsEveryField(kModelFields, sizeof(pocket_model_params),
                              alignof(pocket_model_params)));
static_assert(ListsEveryField(kSessionFields, sizeof(pocket_session_params),
                              alignof(pocket_session_params)));
static_assert(ListsEveryField(kGenerateFields, sizeof(pocket_generate_params),
                              alignof(pocket_generate_params)));
static_assert(ListsEveryField(kScoreFields, sizeof(pocket_score_params),
                              alignof(pocket_score_params)));
static_assert(ListsEveryField(kClassifyFields, sizeof(pocket_classify_params),
                              alignof(pocket_classify_params)));

pocket_model_params ModelDefaults() {
  return pocket_model_params{sizeof(pocket_model_params), nullptr};
}

pocket_session_params SessionDefaults() {
  pocket::SessionOptions d;
  return pocket_session_params{sizeof(pocket_session_params), d.n_ctx, d.n_batch, d.n_threads};
}

pocket_generate_params GenerateDefaults() {
  pocket::GenerateOptions d;
  const pocket::SamplerParams& s = d.sampling;
  return pocket_generate_params{sizeof(pocket_generate_params),
                                d.max_tokens,
                                s.temperature,
                                s.top_k,
                                s.top_p,
                                s.min_p,
                                s.repetition_penalty,
                                s.presence_penalty,
                                s.frequency_penalty,
                                POCKET_SEED_RANDOM,
                                nullptr,
                                0,
                                nullptr,
                                0,
                                nullptr,
                                nullptr,
                                nullptr,
                                nullptr,
                                nullptr,
                                0,
                                pocket::ChatOptions().enable_thinking,
                                false,
                                nullptr,
                                d.draft_max,
                                d.draft_min,
                                0.0f,
                                1};
}

pocket_score_params ScoreDefaults() {
  return pocket_score_params{sizeof(pocket_score_params), nullptr, 0,
                             pocket::ChatOptions().enable_thinking, false};
}

pocket_classify_params ClassifyDefaults() {
  return pocket_classify_params{sizeof(pocket_classify_params), nullptr, 0,
                                pocket::ChatOptions().enable_thinking, false};
}

// The caller's params (NULL: the defaults) as this library's struct, or InvalidArgument naming
// struct_size.
pocket::Status Read(const pocket_model_params* in, pocket_model_params* out) {
  return pocket::capi::ReadParams(in, ModelDefaults(), kModelFields, "pocket_model_params",
                                  "pocket_model_default_params", out);
}
pocket::Status Read(const pocket_session_params* in, pocket_session_params* out) {
  return pocket::capi::ReadParams(in, SessionDefaults(), kSessionFields, "pocket_session_params",
                                  "pocket_session_default_params", out);
}
pocket::Status Read(const pocket_generate_params* in, pocket_generate_params* out) {
  return pocket::capi::ReadParams(in, GenerateDefaults(), kGenerateFields, "pocket_generate_params",
                                  "pocket_generate_default_params", out);
}
pocket::Status Read(const pocket_score_params* in, pocket_score_params* out) {
  return pocket::capi::ReadParams(in, ScoreDefaults(), kScoreFields, "pocket_score_params",
                                  "pocket_score_default_params", out);
}
pocket::Status Read(const pocket_classify_params* in, pocket_classify_params* out) {
  return pocket::capi::ReadParams(in, ClassifyDefaults(), kClassifyFields, "pocket_classify_params",
                                  "pocket_classify_default_params", out);
}

}  // namespace

namespace pocket::capi {

// pocket_generate's request: `params` read and checked, the prompt or messages encoded, the
// constraint compiled, the drafter made (or kept) when params->spec asks for one.
StatusOr<pocket::PreparedRequest> PrepareGenerate(pocket_session* session, const char* prompt,
                                                  const pocket_generate_params* params) {
  pocket_generate_params p;
  POCKET_RETURN_IF_ERROR(Read(params, &p));
  pocket::GenerateRequest request;
  request.max_tokens = p.max_tokens;
  request.sampling.temperature = p.temperature;
  request.sampling.top_k = p.top_k;
  request.sampling.top_p = p.top_p;
  request.sampling.min_p = p.min_p;
  request.sampling.repetition_penalty = p.repetition_penalty;
  request.sampling.presence_penalty = p.presence_penalty;
  request.sampling.frequency_penalty = p.frequency_penalty;
  // A drawn seed is 64 bits and never POCKET_SEED_RANDOM itself, so that the reported seed
  // always reproduces the run.
  request.random_seed = p.seed == POCKET_SEED_RANDOM;
  request.seed_bits = pocket::SeedBits::k64;
  if (!request.random_seed) request.sampling.seed = p.seed;
  for (size_t i = 0; i < p.n_stop_strings; ++i) {
    if (p.stop_strings == nullptr || p.stop_strings[i] == nullptr) {
      return pocket::InvalidArgumentError("stop string ", i, " is NULL");
    }
    request.stop.emplace_back(p.stop_strings[i]);
  }
  // Before the spec: there an empty string means "not given".
  POCKET_RETURN_IF_ERROR(CheckConstraintFields(p));
  pocket::ConstraintSpec& spec = request.constraint;
  for (size_t i = 0; i < p.n_choices; ++i) spec.choices.emplace_back(p.choices[i]);
  if (p.regex != nullptr) spec.regex = p.regex;
  if (p.json_schema != nullptr) spec.json_schema = p.json_schema;
  if (p.grammar != nullptr) spec.grammar = p.grammar;
  if (p.span_source != nullptr) {
    spec.span_source = p.span_source;
    spec.has_span_source = true;
  }
  // Choices are a constraint, generated token by token.
  request.choice_mode = pocket::ChoiceMode::kStream;
  const pocket::Model& model = session->session->model();
  POCKET_RETURN_IF_ERROR(pocket::capi::SetInput(model, prompt, p.messages, p.n_messages,
                                                p.enable_thinking, p.parse_special, &request));
  request.spec = p.spec != nullptr ? p.spec : "";
  request.draft_max = p.draft_max;
  request.draft_min = p.draft_min;
  request.draft_p_min = p.draft_p_min;
  request.lookup.max_branches = p.draft_branches;
  // The drafter is made by the session below (kept across calls): none here.
  pocket::GenerateRequest plain = request;
  plain.spec.clear();
  POCKET_ASSIGN_OR_RETURN(pocket::PreparedRequest prepared, pocket::PrepareRequest(model, plain));
  POCKET_ASSIGN_OR_RETURN(const pocket::SpecMode mode, pocket::ParseSpec(request));
  if (mode.kind != pocket::SpecMode::Kind::kNone) {
    if (session->drafter == nullptr || session->spec != request.spec ||
        session->draft_branches != p.draft_branches) {
      session->drafter.reset();
      pocket::SessionOptions so;
      so.n_ctx = session->session->n_ctx();
      so.pool = session->pool;
      POCKET_ASSIGN_OR_RETURN(session->drafter, pocket::MakeDrafter(request, model, so));
      session->spec = request.spec;
      session->draft_branches = p.draft_branches;
    }
    prepared.options.drafter = session->drafter.get();
    prepared.options.draft_max = request.draft_max;
    prepared.options.draft_min = request.draft_min;
    prepared.options.spec_auto = mode.automatic;
  }
  return prepared;
}

pocket::StreamCallback TextCallback(pocket_text_callback on_text, void* user_data) {
  if (on_text == nullptr) return nullptr;
  return [on_text, user_data](std::string_view piece) {
    return on_text(piece.data(), piece.size(), user_data);
  };
}

void FillResult(const pocket::GenerateResult& r, pocket_generate_result* result) {
  if (result == nullptr) return;
  result->stop_reason = static_cast<pocket_stop_reason>(static_cast<int>(r.stop_reason));
  result->n_prompt_tokens = r.n_prompt_tokens;
  result->n_generated_tokens = static_cast<int32_t>(r.tokens.size());
  result->prefill_ms = static_cast<double>(r.prefill_us) / 1000.0;
  result->decode_ms = static_cast<double>(r.decode_us) / 1000.0;
  result->constraint_ms = static_cast<double>(r.constraint_us) / 1000.0;
  result->seed = r.seed;
  result->n_verify_passes = r.n_verify_passes;
  result->n_drafted_tokens = r.n_drafted;
  result->n_accepted_draft_tokens = r.n_draft_accepted;
  result->n_plain_decode_steps = r.n_plain_steps;
  result->draft_ms = static_cast<double>(r.draft_us) / 1000.0;
  result->n_tree_passes = r.n_tree_passes;
}

// The thread pool the sessions of `model` with `n_threads` share (made when none is alive).
StatusOr<std::shared_ptr<pocket::ThreadPool>> SharedPool(const pocket_model* model,
                                                         int32_t n_threads) {
  if (n_threads < 0 || n_threads > 256) return pocket::MakeThreadPool(n_threads).status();
  const int32_t n = n_threads > 0
                        ? n_threads
                        : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  const std::lock_guard<std::mutex> lock(model->pools_mutex);
  std::shared_ptr<pocket::ThreadPool> pool = model->pools[n].lock();
  if (pool == nullptr) {
    POCKET_ASSIGN_OR_RETURN(pool, pocket::MakeThreadPool(n_threads));
    model->pools[n] = pool;
  }
  return pool;
}

}  // namespace pocket::capi

using pocket::capi::FillResult;
using pocket::capi::PrepareGenerate;
using pocket::capi::TextCallback;

extern "C" {

void pocket_model_params_init(pocket_model_params* params, size_t struct_size) {
  pocket::capi::InitParams(params, struct_size, ModelDefaults(), kModelFields);
}

pocket_status pocket_model_load(const char* path, const pocket_model_params* params,
                                pocket_model** out_model, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (path == nullptr || out_model == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "path and out_model must not be NULL");
    }
    *out_model = nullptr;
    pocket_model_params p;
    if (auto s = Read(params, &p); !s.ok()) return Report(err, s);
    if (auto s = pocket::capi::CheckPathExists(path, "model"); !s.ok()) return Report(err, s);
    pocket::LoadOptions options;
    if (p.tokenizer_path != nullptr) {
      if (auto s = pocket::capi::CheckPathExists(p.tokenizer_path, "tokenizer"); !s.ok()) {
        return Report(err, s);
      }
      options.tokenizer_path = p.tokenizer_path;
    }
    auto model = pocket::Model::Load(path, options);
    if (!model.ok()) return Report(err, model.status());
    *out_model = new pocket_model{std::move(*model)};
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_model_free(pocket_model* model) {
  delete model;
}

int32_t pocket_model_vocab_size(const pocket_model* model) {
  return model == nullptr ? 0 : model->model->config().vocab_size;
}

int32_t pocket_model_context_length(const pocket_model* model) {
  return model == nullptr ? 0 : model->model->config().n_ctx_train;
}

const char* pocket_model_kernels(const pocket_model* model) {
  // Table names are string literals (KernelTable::name views one), so NUL-terminated and static.
  return model == nullptr ? nullptr : model->model->kernels().name.data();
}

pocket_status pocket_tokenize(const pocket_model* model, const char* text, size_t text_len,
                              bool parse_special, int32_t* ids, size_t capacity, size_t* n_ids,
                              pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model == nullptr || (text == nullptr && text_len > 0) || n_ids == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "model, text and n_ids must not be NULL");
    }
    const pocket::Tokenizer* tok = model->model->tokenizer();
    if (tok == nullptr)
      return Fail(err, POCKET_ERR_FAILED_PRECONDITION, "the model has no tokenizer");
    pocket::EncodeOptions options;
    options.parse_special = parse_special;
    auto encoded = tok->Encode(std::string_view(text == nullptr ? "" : text, text_len), options);
    if (!encoded.ok()) return Report(err, encoded.status());
    *n_ids = encoded->size();
    if (encoded->size() > capacity) {
      return Fail(err, POCKET_ERR_BUFFER_TOO_SMALL,
                  "the text needs " + std::to_string(encoded->size()) + " ids, capacity is " +
                      std::to_string(capacity));
    }
    if (!encoded->empty()) std::memcpy(ids, encoded->data(), encoded->size() * sizeof(int32_t));
    return Report(err, pocket::Status::Ok());
  });
}

pocket_status pocket_tokenize_chat(const pocket_model* model, const pocket_chat_message* messages,
                                   size_t n_messages, bool enable_thinking, bool parse_special,
                                   int32_t* ids, size_t capacity, size_t* n_ids,
                                   pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model == nullptr || messages == nullptr || n_ids == nullptr ||
        (ids == nullptr && capacity > 0)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "model, messages and n_ids must not be NULL (nor ids when capacity > 0)");
    }
    auto prompt = pocket::capi::EncodeInput(*model->model, nullptr, messages, n_messages,
                                            enable_thinking, parse_special);
    if (!prompt.ok()) return Report(err, prompt.status());
    const std::vector<int32_t>& encoded = prompt->ids;
    *n_ids = encoded.size();
    if (encoded.size() > capacity) {
      return Fail(err, POCKET_ERR_BUFFER_TOO_SMALL,
                  "the chat needs " + std::to_string(encoded.size()) + " ids, capacity is " +
                      std::to_string(capacity));
    }
    if (!encoded.empty()) std::memcpy(ids, encoded.data(), encoded.size() * sizeof(int32_t));
    return Report(err, pocket::Status::Ok());
  });
}

pocket_status pocket_detokenize(const pocket_model* model, const int32_t* ids, size_t n_ids,
                                char* text, size_t capacity, size_t* n_bytes, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model == nullptr || (ids == nullptr && n_ids > 0) || n_bytes == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "model, ids and n_bytes must not be NULL");
    }
    const pocket::Tokenizer* tok = model->model->tokenizer();
    if (tok == nullptr)
      return Fail(err, POCKET_ERR_FAILED_PRECONDITION, "the model has no tokenizer");
    auto decoded = tok->Decode(std::span<const int32_t>(ids, n_ids));
    if (!decoded.ok()) return Report(err, decoded.status());
    *n_bytes = decoded->size();
    if (decoded->size() > capacity) {
      return Fail(err, POCKET_ERR_BUFFER_TOO_SMALL,
                  "the text needs " + std::to_string(decoded->size()) + " bytes");
    }
    if (!decoded->empty()) std::memcpy(text, decoded->data(), decoded->size());
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_session_params_init(pocket_session_params* params, size_t struct_size) {
  pocket::capi::InitParams(params, struct_size, SessionDefaults(), kSessionFields);
}

pocket_status pocket_session_create(const pocket_model* model, const pocket_session_params* params,
                                    pocket_session** out_session, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model == nullptr || out_session == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "model and out_session must not be NULL");
    }
    *out_session = nullptr;
    pocket_session_params p;
    if (auto s = Read(params, &p); !s.ok()) return Report(err, s);
    pocket::SessionOptions options;
    options.n_ctx = p.n_ctx;
    options.n_batch = p.n_batch;
    options.n_threads = p.n_threads;
    if (options.n_threads < 0 || options.n_threads > 256) {
      return Report(err, pocket::MakeThreadPool(options.n_threads).status());
    } else {
      const int32_t n =
          options.n_threads > 0
              ? options.n_threads
              : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
      const std::lock_guard<std::mutex> lock(model->pools_mutex);
      options.pool = model->pools[n].lock();
      if (options.pool == nullptr) {
        auto pool = pocket::MakeThreadPool(options.n_threads);
        if (!pool.ok()) return Report(err, pool.status());
        options.pool = *pool;
        model->pools[n] = options.pool;
      }
    }
    auto session = pocket::Session::Create(model->model, options);
    if (!session.ok()) return Report(err, session.status());
    *out_session = new pocket_session{std::move(*session), options.pool};
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_session_free(pocket_session* session) {
  delete session;
}

int32_t pocket_session_n_threads(const pocket_session* session) {
  return session == nullptr ? 0 : session->session->n_threads();
}

// Only sets the request: the Session clears it when the call it stops returns (see
// Session::Cancel), so nothing here may clear it on a call's entry.
void pocket_session_cancel(pocket_session* session) {
  if (session != nullptr) session->session->Cancel();
}

pocket_status pocket_session_eval(pocket_session* session, const int32_t* ids, size_t n_ids,
                                  const float** logits, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr || logits == nullptr || (ids == nullptr && n_ids > 0)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "session and logits must not be NULL, nor ids when n_ids > 0");
    }
    *logits = nullptr;
    auto r = session->session->EvaluateIds(std::span<const int32_t>(ids, n_ids));
    if (!r.ok()) return Report(err, r.status());
    *logits = r->data();
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_session_reset(pocket_session* session) {
  if (session != nullptr) session->session->Reset();
}

pocket_status pocket_session_save(const pocket_session* session, const char* path,
                                  const void* user_data, size_t n_user_data, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr || path == nullptr || (n_user_data > 0 && user_data == nullptr)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "session and path must not be NULL, nor user_data when n_user_data > 0");
    }
    return Report(err,
                  session->session->Save(
                      path, std::string_view(static_cast<const char*>(user_data), n_user_data)));
  });
}

pocket_status pocket_session_load(pocket_session* session, const char* path, void* user_data,
                                  size_t capacity, size_t* n_user_data, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr || path == nullptr || (capacity > 0 && user_data == nullptr)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "session and path must not be NULL, nor user_data when capacity > 0");
    }
    if (auto s = pocket::capi::CheckPathExists(path, "saved session"); !s.ok()) {
      return Report(err, s);
    }
    uint64_t needed = UINT64_MAX;
    auto data = session->session->Load(path, capacity, &needed);
    if (needed != UINT64_MAX && n_user_data != nullptr) *n_user_data = static_cast<size_t>(needed);
    if (!data.ok() && needed != UINT64_MAX && needed > capacity) {
      return Fail(err, POCKET_ERR_BUFFER_TOO_SMALL, data.status().message());
    }
    if (!data.ok()) return Report(err, data.status());
    if (!data->empty()) std::memcpy(user_data, data->data(), data->size());
    if (n_user_data != nullptr) *n_user_data = data->size();
    return Report(err, pocket::Status::Ok());
  });
}

pocket_status pocket_adapter_load(const pocket_model* model, const char* path,
                                  pocket_adapter** out_adapter, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model == nullptr || path == nullptr || out_adapter == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "model, path and out_adapter must not be NULL");
    }
    *out_adapter = nullptr;
    if (auto s = pocket::capi::CheckPathExists(path, "adapter"); !s.ok()) return Report(err, s);
    auto a = pocket::LoraAdapter::Load(path, *model->model);
    if (!a.ok()) return Report(err, a.status());
    auto out = std::make_unique<pocket_adapter>();
    out->adapter = std::move(*a);
    out->model = model->model.get();
    out->targets = out->adapter->targets();
    *out_adapter = out.release();
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_adapter_free(pocket_adapter* adapter) {
  delete adapter;
}

int32_t pocket_adapter_max_rank(const pocket_adapter* adapter) {
  return adapter == nullptr ? 0 : adapter->adapter->max_rank();
}
int32_t pocket_adapter_n_matrices(const pocket_adapter* adapter) {
  return adapter == nullptr ? 0 : adapter->adapter->n_pairs();
}
uint64_t pocket_adapter_bytes(const pocket_adapter* adapter) {
  return adapter == nullptr ? 0 : adapter->adapter->bytes();
}
const char* pocket_adapter_targets(const pocket_adapter* adapter) {
  return adapter == nullptr ? "" : adapter->targets.c_str();
}

pocket_status pocket_session_set_adapters(pocket_session* session,
                                          const pocket_adapter* const* adapters,
                                          const float* scales, size_t n, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr || (n > 0 && adapters == nullptr)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "session must not be NULL, nor adapters when n > 0");
    }
    pocket::AdapterSet set;
    for (size_t i = 0; i < n; ++i) {
      if (adapters[i] == nullptr) {
        return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                    "adapters[" + std::to_string(i) + "] is NULL");
      }
      if (adapters[i]->model != &session->session->model()) {
        return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                    "adapters[" + std::to_string(i) + "] (" + adapters[i]->adapter->path() +
                        ") was loaded for another model than the session's");
      }
      set.push_back({adapters[i]->adapter, scales != nullptr ? scales[i] : 1.0f});
    }
    return Report(err, session->session->SetAdapters(std::move(set)));
  });
}

size_t pocket_session_n_adapters(const pocket_session* session) {
  return session == nullptr ? 0 : session->session->adapters().size();
}

void pocket_generate_params_init(pocket_generate_params* params, size_t struct_size) {
  pocket::capi::InitParams(params, struct_size, GenerateDefaults(), kGenerateFields);
}

namespace {}  // namespace

pocket_status pocket_generate(pocket_session* session, const char* prompt,
                              const pocket_generate_params* params, pocket_text_callback on_text,
                              void* user_data, pocket_generate_result* result, pocket_error* err) {
  // No figures of an earlier call survive this one, whatever happens.
  if (result != nullptr) std::memset(result, 0, sizeof(*result));
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr) return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "session is NULL");
    auto prepared = PrepareGenerate(session, prompt, params);
    if (!prepared.ok()) return Report(err, prepared.status());
    auto r = session->session->Generate(std::span<const int32_t>(prepared->prompt.ids),
                                        prepared->options, TextCallback(on_text, user_data));
    if (!r.ok()) return Report(err, r.status());
    FillResult(*r, result);
    return Report(err, pocket::Status::Ok());
  });
}

void pocket_score_params_init(pocket_score_params* params, size_t struct_size) {
  pocket::capi::InitParams(params, struct_size, ScoreDefaults(), kScoreFields);
}

pocket_status pocket_score(pocket_session* session, const char* prompt,
                           const pocket_score_params* params, const char* const* candidates,
                           size_t n_candidates, pocket_candidate_score* scores, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr || candidates == nullptr || scores == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "session, candidates and scores must not be NULL");
    }
    pocket_score_params p;
    if (auto s = Read(params, &p); !s.ok()) return Report(err, s);
    const pocket::Model& model = session->session->model();
    pocket::PromptRequest request;
    const pocket::Status given = pocket::capi::SetInput(
        model, prompt, p.messages, p.n_messages, p.enable_thinking, p.parse_special, &request);
    if (!given.ok()) return Report(err, given);
    auto input = pocket::EncodeRequestPrompt(model, request);
    if (!input.ok()) return Report(err, input.status());
    std::vector<std::string> texts;
    for (size_t i = 0; i < n_candidates; ++i) {
      if (candidates[i] == nullptr) {
        return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                    "candidate " + std::to_string(i) + " is NULL");
      }
      texts.emplace_back(candidates[i]);
    }
    // The one candidate rule (runtime/candidates.h, as --choice in best mode), continuing the
    // prompt, or a chat's text after the template's last control token.
    auto cands = pocket::EncodeCandidates(model, request, *input, texts);
    if (!cands.ok()) return Report(err, cands.status());
    auto r = session->session->Score(input->ids, *cands);
    if (!r.ok()) return Report(err, r.status());
    for (size_t i = 0; i < r->size(); ++i) {
      const pocket::CandidateScore& c = (*r)[i];
      scores[i] =
          pocket_candidate_score{static_cast<size_t>(c.index),
                                 static_cast<int32_t>(c.tokens.size()), c.logprob, c.probability};
    }
    return Report(err, pocket::Status::Ok());
  });
}

size_t pocket_adapter_n_labels(const pocket_adapter* adapter) {
  return adapter == nullptr ? 0 : adapter->adapter->classifier().labels.size();
}

const char* pocket_adapter_label(const pocket_adapter* adapter, size_t index) {
  if (adapter == nullptr) return nullptr;
  const std::vector<std::string>& labels = adapter->adapter->classifier().labels;
  return index < labels.size() ? labels[index].c_str() : nullptr;
}

size_t pocket_model_n_labels(const pocket_model* model) {
  return model == nullptr ? 0 : model->model->classifier().labels.size();
}

const char* pocket_model_label(const pocket_model* model, size_t index) {
  if (model == nullptr) return nullptr;
  const std::vector<std::string>& labels = model->model->classifier().labels;
  return index < labels.size() ? labels[index].c_str() : nullptr;
}

void pocket_classify_params_init(pocket_classify_params* params, size_t struct_size) {
  pocket::capi::InitParams(params, struct_size, ClassifyDefaults(), kClassifyFields);
}

pocket_status pocket_classify(pocket_session* session, const char* prompt,
                              const pocket_classify_params* params, pocket_label_score* scores,
                              size_t capacity, size_t* n_scores, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (session == nullptr || n_scores == nullptr || (scores == nullptr && capacity > 0)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "session and n_scores must not be NULL (nor scores when capacity > 0)");
    }
    pocket_classify_params p;
    if (auto s = Read(params, &p); !s.ok()) return Report(err, s);
    const pocket::Model& model = session->session->model();
    // The session's head: an adapter's (a task = adapter + head), else the model's.
    const std::vector<std::string>& labels = session->session->classifier().labels;
    *n_scores = labels.size();
    if (labels.empty()) {
      return Fail(err, POCKET_ERR_FAILED_PRECONDITION,
                  model.source().path() +
                      " has no classification head (tensor cls_head.weight with its labels) and "
                      "neither do the session's adapters; add one with pocket convert "
                      "--classifier-head FILE --classifier-labels a,b,c");
    }
    // The same tokens pocket_generate and pocket_score evaluate for this input.
    auto input = pocket::capi::EncodeInput(model, prompt, p.messages, p.n_messages,
                                           p.enable_thinking, p.parse_special);
    if (!input.ok()) return Report(err, input.status());
    // Before the forward pass: a buffer that is too small costs nothing.
    if (labels.size() > capacity) {
      return Fail(err, POCKET_ERR_BUFFER_TOO_SMALL,
                  "the model has " + std::to_string(labels.size()) + " labels, capacity is " +
                      std::to_string(capacity));
    }
    auto r = session->session->Classify(input->ids);
    if (!r.ok()) return Report(err, r.status());
    for (size_t i = 0; i < r->size(); ++i) {
      const pocket::LabelScore& l = (*r)[i];
      const size_t index = static_cast<size_t>(l.index);
      scores[i] =
          pocket_label_score{index, labels[index].c_str(), l.logit, l.logprob, l.probability};
    }
    return Report(err, pocket::Status::Ok());
  });
}

}  // extern "C"
