#include "runtime/session.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <thread>

#include "base/timer.h"
#include "runtime/engine.h"
#include "runtime/token_step.h"

namespace pocket {

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEos:
      return "eos";
    case StopReason::kStopString:
      return "stop_string";
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kCancelled:
      return "cancelled";
    case StopReason::kCallback:
      return "callback";
    case StopReason::kContextFull:
      return "context_full";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const Model> model,
                                                   const SessionOptions& options) {
  if (!model) return InvalidArgumentError("no model");
  const ModelConfig& c = model->config();
  if (options.n_ctx <= 0) return InvalidArgumentError("context size must be positive");
  if (options.n_batch <= 0) return InvalidArgumentError("batch size must be positive");
  const int32_t n_ctx = std::min(options.n_ctx, c.n_ctx_train);
  const int32_t n_batch = std::min(options.n_batch, n_ctx);
  std::shared_ptr<ThreadPool> pool = options.pool;
  if (pool == nullptr) {
    POCKET_ASSIGN_OR_RETURN(pool, MakeThreadPool(options.n_threads));
  } else if (options.n_threads != 0 && options.n_threads != pool->n_threads()) {
    return InvalidArgumentError("thread count ", options.n_threads, " differs from the pool's ",
                                pool->n_threads());
  }
  POCKET_ASSIGN_OR_RETURN(KvCache kv, KvCache::Create(c, n_ctx, options.kv_type));
  POCKET_ASSIGN_OR_RETURN(ForwardScratch scratch,
                          ForwardScratch::Create(*model, n_batch, pool->n_threads()));
  auto session = std::unique_ptr<Session>(
      new Session(std::move(model), std::move(kv), std::move(scratch), n_batch, std::move(pool)));
  session->prefix_cache_ = options.prefix_cache;
  return session;
}

Session::~Session() {
  if (engine_request_ != nullptr) engine_request_->Detach(this);
  if (engine_parked_ != nullptr) engine_parked_->Unpark(this);
}

StatusOr<std::shared_ptr<ThreadPool>> MakeThreadPool(int32_t n_threads) {
  if (n_threads < 0 || n_threads > 256) {
    return InvalidArgumentError("thread count must be 0 (automatic) to 256, got ", n_threads);
  }
  const int32_t n = n_threads > 0
                        ? n_threads
                        : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  return std::make_shared<ThreadPool>(n);
}

Session::Session(std::shared_ptr<const Model> model, KvCache kv, ForwardScratch scratch,
                 int32_t n_batch, std::shared_ptr<ThreadPool> pool)
    : model_(std::move(model)),
      kv_(std::move(kv)),
      scratch_(std::move(scratch)),
      pool_(std::move(pool)),
      n_batch_(n_batch),
      logits_(static_cast<size_t>(model_->config().vocab_size)),
      hidden_(static_cast<size_t>(model_->config().d_model)) {
  history_.reserve(static_cast<size_t>(kv_.n_ctx()));
}

Status Session::Append(std::span<const int32_t> tokens, float* all_logits,
                       const PrefillProgress& progress) {
  return AppendObserved(tokens, all_logits, progress, nullptr);
}

Status Session::AppendObserved(std::span<const int32_t> tokens, float* all_logits,
                               const PrefillProgress& progress, Drafter* observer) {
  const int32_t vocab = model_->config().vocab_size;
  const size_t n_past = history_.size();
  if (n_past + tokens.size() > static_cast<size_t>(kv_.n_ctx())) {
    return OutOfRangeError(n_past + tokens.size(), " tokens do not fit the context of ",
                           kv_.n_ctx(), " (", n_past, " already in it)");
  }
  for (size_t done = 0; done < tokens.size();) {
    if (cancelled()) return CancelledError("cancelled during prefill after ", done, " tokens");
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(n_batch_));
    std::span<const int32_t> chunk = tokens.subspan(done, n);
    const int32_t rows = static_cast<int32_t>(n);
    const std::span<const int32_t> out_rows =
        all_logits != nullptr ? scratch_.rows(0, rows) : scratch_.rows(rows - 1, rows);
    float* out_logits = all_logits != nullptr ? all_logits + done * vocab : logits_.data();
    if (observer != nullptr) {
      POCKET_RETURN_IF_ERROR(EvaluateObserved(chunk, out_rows, out_logits, *observer));
    } else {
      POCKET_RETURN_IF_ERROR(Evaluate(chunk, out_rows, out_logits, nullptr));
    }
    if (all_logits != nullptr) {
      std::copy_n(all_logits + (done + n - 1) * vocab, vocab, logits_.data());
    }
    const size_t pos = history_.size();
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    if (observer != nullptr) {
      POCKET_RETURN_IF_ERROR(
          observer->ObserveHidden(static_cast<int32_t>(pos), rows, spec_hidden_.data(),
                                  n * static_cast<size_t>(model_->config().d_model)));
      hidden_drafter_ = observer;
      hidden_synced_ = history_.size();
    }
    logits_at_ = history_.size();
    done += n;
    if (progress) progress(static_cast<int32_t>(done), static_cast<int32_t>(tokens.size()));
  }
  return Status::Ok();
}

Status Session::Evaluate(std::span<const int32_t> tokens, std::span<const int32_t> rows,
                         float* logits, float* hidden) {
  BatchSegment segment{&kv_, 0, static_cast<int32_t>(tokens.size()),
                       static_cast<int32_t>(history_.size())};
  segment.adapters = &adapters_;
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.segments = std::span<const BatchSegment>(&segment, 1);
  batch.output_rows = rows;
  batch.logits = logits;
  batch.final_hidden = hidden;
#if POCKET_FORWARD_TRACE
  batch.trace = &trace_;
#endif
  return Forward(*model_, scratch_, *pool_, batch);
}

Status Session::EvaluateTree(std::span<const int32_t> tokens,
                             std::span<const BatchSegment> segments, float* logits) {
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.segments = segments;
  batch.output_rows = scratch_.rows(0, static_cast<int32_t>(tokens.size()));
  batch.logits = logits;
#if POCKET_FORWARD_TRACE
  batch.trace = &trace_;
#endif
  return Forward(*model_, scratch_, *pool_, batch);
}

Status Session::EvaluateObserved(std::span<const int32_t> tokens, std::span<const int32_t> rows,
                                 float* logits, const Drafter& observer) {
  const std::span<const int32_t> layers = observer.target_layers();
  const size_t need = layers.size() * tokens.size() * static_cast<size_t>(model_->config().d_model);
  if (spec_hidden_.size() < need) spec_hidden_.resize(need);  // grows to one chunk, once
  BatchSegment segment{&kv_, 0, static_cast<int32_t>(tokens.size()),
                       static_cast<int32_t>(history_.size())};
  segment.adapters = &adapters_;
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.segments = std::span<const BatchSegment>(&segment, 1);
  batch.output_rows = rows;
  batch.logits = logits;
  batch.hidden_layers = layers;
  batch.layer_hidden = spec_hidden_.data();
  batch.hidden_rows = scratch_.rows(0, static_cast<int32_t>(tokens.size()));
#if POCKET_FORWARD_TRACE
  batch.trace = &trace_;
#endif
  return Forward(*model_, scratch_, *pool_, batch);
}

Status Session::SetContext(std::span<const int32_t> tokens, const PrefillProgress& progress) {
  if (tokens.size() > static_cast<size_t>(kv_.n_ctx())) {
    return OutOfRangeError("the prompt is ", tokens.size(), " tokens, longer than the context of ",
                           kv_.n_ctx(), " tokens");
  }
  size_t common = 0;
  while (common < history_.size() && common < tokens.size() && history_[common] == tokens[common]) {
    ++common;
  }
  // The next sample needs the logits after the last token: re-evaluate it unless they are the
  // ones at hand (the same context again, as when scoring several candidate sets).
  if (common == tokens.size() && common > 0 && logits_at_ != common) --common;
  Truncate(common);
  return Append(tokens.subspan(common), nullptr, progress);
}

StatusOr<std::span<const float>> Session::EvaluateIds(std::span<const int32_t> ids) {
  const CancelScope cancel_scope(&cancel_);
  if (ids.empty()) return InvalidArgumentError("no token ids to evaluate");
  const int32_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgumentError("token id ", i, " is ", ids[i], ", outside the vocabulary (0 to ",
                                  vocab - 1, ")");
    }
  }
  POCKET_RETURN_IF_ERROR(SetContext(ids));
  return last_logits();
}

StatusOr<GenerateResult> Session::Generate(std::string_view text, const GenerateOptions& options,
                                           const StreamCallback& on_text) {
  const Tokenizer* tok = model_->tokenizer();
  if (tok == nullptr) {
    return FailedPreconditionError("the model has no tokenizer; pass one with --tokenizer");
  }
  EncodeOptions enc;
  enc.add_bos = tok->spec().add_bos;
  POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, tok->Encode(text, enc));
  return Generate(std::span<const int32_t>(prompt), options, on_text);
}

StatusOr<bool> Session::PrefillPrompt(std::span<const int32_t> prompt,
                                      const GenerateOptions& options, GenerateResult* result) {
  size_t common = 0;
  while (common < history_.size() && common < prompt.size() && history_[common] == prompt[common]) {
    ++common;
  }
  Drafter* observer = options.drafter != nullptr && !options.drafter->target_layers().empty()
                          ? options.drafter
                          : nullptr;
  if (prompt.size() > static_cast<size_t>(kv_.n_ctx())) {
    return OutOfRangeError("the prompt is ", prompt.size(), " tokens, longer than the context of ",
                           kv_.n_ctx(), " tokens");
  }
  // The next sample needs the logits after the last token (as in SetContext); a block drafter
  // needs the hidden states of every row, so only rows it already has are reused.
  if (common == prompt.size() && logits_at_ != common) --common;
  if (observer != nullptr) {
    const size_t synced = hidden_drafter_ == observer ? hidden_synced_ : 0;
    common = std::min({common, synced, static_cast<size_t>(observer->n_observed())});
  }
  Truncate(common);
  // A block drafter needs the hidden states of every row: none come from the prefix cache.
  if (observer == nullptr) {
    POCKET_ASSIGN_OR_RETURN(common, RestorePrefix(prompt, common, result));
  }
  result->n_reused_tokens = static_cast<int32_t>(std::min(common, prompt.size() - 1));
  result->n_prompt_tokens = static_cast<int32_t>(prompt.size()) - result->n_reused_tokens;
  const Status s =
      AppendObserved(prompt.subspan(common), nullptr, options.on_prefill_progress, observer);
  if (s.code() == StatusCode::kCancelled) {
    result->stop_reason = StopReason::kCancelled;
    return false;
  }
  POCKET_RETURN_IF_ERROR(s);
  return true;
}

StatusOr<size_t> Session::RestorePrefix(std::span<const int32_t> prompt, size_t common,
                                        GenerateResult* result) {
  if (prefix_cache_ == nullptr || prompt.size() < 2) return common;
  // At least the last prompt token is evaluated: its logits are the first sample's.
  POCKET_ASSIGN_OR_RETURN(
      const int32_t n, prefix_cache_->Restore(*model_, adapters_, prompt, prompt.size() - 1, common,
                                              kv_, cache_salt_));
  if (n == 0) return common;
  history_.assign(prompt.begin(), prompt.begin() + n);
  logits_at_ = 0;
  result->n_cached_tokens = n - static_cast<int32_t>(common);
  return static_cast<size_t>(n);
}

void Session::StoreContext() {
  if (prefix_cache_ == nullptr) return;
  // A store that fails (memory) is the cache's loss, counted in its stats, not the request's error.
  const Status stored = prefix_cache_->Store(model_, adapters_, history_, kv_, cache_salt_);
  static_cast<void>(stored);  // counted in the cache's stats
}

void Session::SetCacheSalt(std::string_view salt) {
  if (salt == cache_salt_) return;
  ResetKeepingPages();
  cache_salt_.assign(salt);
}

StatusOr<GenerateResult> Session::Generate(std::span<const int32_t> prompt,
                                           const GenerateOptions& options,
                                           const StreamCallback& on_text) {
  if (options.drafter != nullptr) return GenerateUnbatched(prompt, options, on_text);
  const CancelScope cancel_scope(&cancel_);
  POCKET_RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_tokens < 0) return InvalidArgumentError("max tokens must be >= 0");
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  if (engine_ == nullptr) {
    POCKET_ASSIGN_OR_RETURN(engine_, Engine::ForSession(*this));
  }
  POCKET_ASSIGN_OR_RETURN(const int64_t id, engine_->Submit(this, prompt, options, on_text));
  // Step fails only when called from inside a step (a stream callback): not this outer call.
  while (!engine_->done(id)) {
    POCKET_ASSIGN_OR_RETURN(const int32_t active, engine_->Step());
    static_cast<void>(active);
  }
  return engine_->Take(id);
}

StatusOr<GenerateResult> Session::GenerateUnbatched(std::span<const int32_t> prompt,
                                                    const GenerateOptions& options,
                                                    const StreamCallback& on_text) {
  const CancelScope cancel_scope(&cancel_);
  POCKET_RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_tokens < 0) return InvalidArgumentError("max tokens must be >= 0");
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  GenerateResult result;
  result.seed = options.sampling.seed;
  Stopwatch watch;
  POCKET_ASSIGN_OR_RETURN(const bool prefilled, PrefillPrompt(prompt, options, &result));
  if (!prefilled) return result;
  result.prefill_us = watch.elapsed_us();
  watch.Reset();

  // The token steps: logits -> mask -> sample -> accept -> stop checks -> stream (token_step.h),
  // then the chosen token's forward pass gives the next logits.
  // The last token is sampled, never evaluated: the context yields one more than its free rows.
  const int32_t room = n_ctx() - static_cast<int32_t>(history_.size()) + 1;
  TokenStep step(*model_, options, on_text, &result, &masked_, &mask_bits_, room);
  if (!history_.empty()) step.Follow(history_.back());
  if (options.drafter != nullptr) {
    POCKET_RETURN_IF_ERROR(DecodeSpeculative(step, options, &result));
    POCKET_RETURN_IF_ERROR(step.Finish(options.max_tokens));
    result.decode_us = watch.elapsed_us();
    StoreContext();
    return result;
  }
  for (int32_t i = 0; i < options.max_tokens; ++i) {
    if (cancelled()) {
      result.stop_reason = StopReason::kCancelled;
      break;
    }
    POCKET_ASSIGN_OR_RETURN(const int32_t token, step.Choose(logits_, history_));
    if (token < 0) break;
    POCKET_ASSIGN_OR_RETURN(const bool go_on, step.Accept(token));
    if (!go_on) break;
    if (history_.size() >= static_cast<size_t>(kv_.n_ctx())) {
      result.stop_reason = StopReason::kContextFull;
      break;
    }
    // The last token of the budget needs no forward pass: nothing samples from its logits.
    if (i + 1 == options.max_tokens) break;
    const Status d = Append(std::span<const int32_t>(&token, 1));
    if (d.code() == StatusCode::kCancelled) {
      result.stop_reason = StopReason::kCancelled;
      break;
    }
    POCKET_RETURN_IF_ERROR(d);
  }
  POCKET_RETURN_IF_ERROR(step.Finish(options.max_tokens));
  result.decode_us = watch.elapsed_us();
  // After the output (not before the first token): the whole context, the reply's rows too, so
  // that a conversation's next turn finds it.
  StoreContext();
  return result;
}

}  // namespace pocket

namespace pocket {

Status Session::SetAdapters(AdapterSet set) {
  if (SameAdapters(set, adapters_)) return Status::Ok();
  for (const AdapterUse& u : set) {
    if (u.adapter == nullptr) return InvalidArgumentError("adapter set holds a null adapter");
    if (u.adapter->n_layers() != model_->config().n_layers) {
      return InvalidArgumentError("adapter ", u.adapter->path(), " has ", u.adapter->n_layers(),
                                  " layers; the session's model has ", model_->config().n_layers);
    }
    if (!std::isfinite(u.scale)) {
      return InvalidArgumentError("adapter ", u.adapter->path(), ": scale must be finite");
    }
  }
  POCKET_RETURN_IF_ERROR(scratch_.ReserveAdapters(*model_, AdapterMidFloats(set)));
  adapters_ = std::move(set);
  // Every cached key and value was computed with the old set (its pages serve the next context).
  ResetKeepingPages();
  return Status::Ok();
}

}  // namespace pocket
