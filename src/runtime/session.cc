#include "runtime/session.h"

#include <algorithm>
#include <thread>

#include "base/timer.h"
#include "runtime/text_stream.h"

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
  if (options.n_threads < 0 || options.n_threads > 256) {
    return InvalidArgumentError("thread count must be 0 (automatic) to 256, got ",
                                options.n_threads);
  }
  const int32_t n_threads =
      options.n_threads > 0
          ? options.n_threads
          : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  POCKET_ASSIGN_OR_RETURN(KvCache kv, KvCache::Create(c, n_ctx, options.kv_type));
  POCKET_ASSIGN_OR_RETURN(ForwardScratch scratch,
                          ForwardScratch::Create(*model, n_batch, n_threads));
  return std::unique_ptr<Session>(
      new Session(std::move(model), std::move(kv), std::move(scratch), n_batch, n_threads));
}

Session::Session(std::shared_ptr<const Model> model, KvCache kv, ForwardScratch scratch,
                 int32_t n_batch, int32_t n_threads)
    : model_(std::move(model)),
      kv_(std::move(kv)),
      scratch_(std::move(scratch)),
      pool_(std::make_unique<ThreadPool>(n_threads)),
      n_batch_(n_batch),
      logits_(static_cast<size_t>(model_->config().vocab_size)) {
  history_.reserve(static_cast<size_t>(kv_.n_ctx()));
}

Status Session::Append(std::span<const int32_t> tokens, float* all_logits,
                       const PrefillProgress& progress) {
  const int32_t vocab = model_->config().vocab_size;
  const size_t n_past = history_.size();
  if (n_past + tokens.size() > static_cast<size_t>(kv_.n_ctx())) {
    return OutOfRangeError(n_past + tokens.size(), " tokens do not fit the context of ",
                           kv_.n_ctx(), " (", n_past, " already in it)");
  }
  for (size_t done = 0; done < tokens.size();) {
    if (cancelled()) return CancelledError("cancelled during prefill after ", done, " tokens");
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(n_batch_));
    const int32_t pos = static_cast<int32_t>(history_.size());
    std::span<const int32_t> chunk = tokens.subspan(done, n);
    Status s;
    if (all_logits != nullptr) {
      s = Prefill(*model_, kv_, scratch_, *pool_, chunk, pos, true, all_logits + done * vocab);
      if (s.ok()) std::copy_n(all_logits + (done + n - 1) * vocab, vocab, logits_.data());
    } else if (n == 1) {
      s = Decode(*model_, kv_, scratch_, *pool_, chunk[0], pos, logits_.data());
    } else {
      s = Prefill(*model_, kv_, scratch_, *pool_, chunk, pos, false, logits_.data());
    }
    if (!s.ok()) return s;
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    done += n;
    if (progress) progress(static_cast<int32_t>(done), static_cast<int32_t>(tokens.size()));
  }
  return Status::Ok();
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
  // Re-evaluate at least the last token: its logits are what the next sample needs.
  if (common == tokens.size() && common > 0) --common;
  history_.resize(common);
  return Append(tokens.subspan(common), nullptr, progress);
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

StatusOr<GenerateResult> Session::Generate(std::span<const int32_t> prompt,
                                           const GenerateOptions& options,
                                           const StreamCallback& on_text) {
  POCKET_RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_tokens < 0) return InvalidArgumentError("max tokens must be >= 0");
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  cancel_.store(false, std::memory_order_relaxed);
  const Tokenizer* tok = model_->tokenizer();
  GenerateResult result;
  Stopwatch watch;
  size_t common = 0;
  while (common < history_.size() && common < prompt.size() && history_[common] == prompt[common]) {
    ++common;
  }
  result.n_reused_tokens = static_cast<int32_t>(std::min(common, prompt.size() - 1));
  result.n_prompt_tokens = static_cast<int32_t>(prompt.size()) - result.n_reused_tokens;
  Status s = SetContext(prompt, options.on_prefill_progress);
  if (s.code() == StatusCode::kCancelled) {
    result.stop_reason = StopReason::kCancelled;
    return result;
  }
  POCKET_RETURN_IF_ERROR(s);
  result.prefill_us = watch.elapsed_us();
  watch.Reset();

  Sampler sampler(options.sampling, model_->config().vocab_size);
  TextStream stream(tok, options.stop_strings);
  const std::vector<int32_t>& stop_ids = model_->stop_token_ids();
  bool keep_going = true;
  auto emit = [&](const std::string& piece) {
    if (piece.empty() || !keep_going) return;
    result.text += piece;
    if (on_text && !on_text(piece)) keep_going = false;
  };
  result.stop_reason = StopReason::kMaxTokens;
  for (int32_t i = 0; i < options.max_tokens; ++i) {
    if (cancelled()) {
      result.stop_reason = StopReason::kCancelled;
      break;
    }
    const int32_t token = sampler.Sample(logits_.data(), history_);
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      result.stop_reason = StopReason::kEos;
      break;
    }
    result.tokens.push_back(token);
    if (tok != nullptr) {
      std::string piece;
      const bool hit_stop = stream.Push(token, &piece);
      emit(piece);
      if (hit_stop) {
        result.stop_reason = StopReason::kStopString;
        break;
      }
      if (!keep_going) {
        result.stop_reason = StopReason::kCallback;
        break;
      }
    }
    if (history_.size() >= static_cast<size_t>(kv_.n_ctx())) {
      result.stop_reason = StopReason::kContextFull;
      break;
    }
    // The last token of the budget needs no forward pass: nothing samples from its logits.
    if (i + 1 == options.max_tokens) break;
    Status d = Append(std::span<const int32_t>(&token, 1));
    if (d.code() == StatusCode::kCancelled) {
      result.stop_reason = StopReason::kCancelled;
      break;
    }
    POCKET_RETURN_IF_ERROR(d);
  }
  if (tok != nullptr && result.stop_reason != StopReason::kStopString) emit(stream.Flush());
  result.decode_us = watch.elapsed_us();
  return result;
}

}  // namespace pocket
