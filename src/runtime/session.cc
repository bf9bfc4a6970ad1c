#include "runtime/session.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <thread>

#include "base/timer.h"
#include "kernels/reference/reference_kernels.h"
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
      logits_(static_cast<size_t>(model_->config().vocab_size)),
      hidden_(static_cast<size_t>(model_->config().d_model)) {
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
    logits_at_ = history_.size();
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
  // The next sample needs the logits after the last token: re-evaluate it unless they are the
  // ones at hand (the same context again, as when scoring several candidate sets).
  if (common == tokens.size() && common > 0 && logits_at_ != common) --common;
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
  const CancelScope cancel_scope(&cancel_);
  POCKET_RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_tokens < 0) return InvalidArgumentError("max tokens must be >= 0");
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  const Tokenizer* tok = model_->tokenizer();
  GenerateResult result;
  result.seed = options.sampling.seed;
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
  Constraint* constraint = options.constraint;
  if (constraint != nullptr) constraint->Reset();
  for (int32_t i = 0; i < options.max_tokens; ++i) {
    if (cancelled()) {
      result.stop_reason = StopReason::kCancelled;
      break;
    }
    int32_t token;
    if (constraint != nullptr) {
      const Stopwatch mask_watch;
      const size_t n_allowed = constraint->AllowedMask(&mask_bits_);
      const bool complete = constraint->Complete();
      result.constraint_us += mask_watch.elapsed_us();
      ++result.n_masks;
      if (n_allowed == 0) {
        POCKET_RETURN_IF_ERROR(constraint->error());
        if (!complete) return InternalError("the constraint allows no token and is not complete");
        result.stop_reason = StopReason::kEos;  // nothing can extend a complete output
        break;
      }
      const size_t n_words = std::min(mask_bits_.size(), (logits_.size() + 63) / 64);
      if (n_allowed == 1 && !complete) {
        // Jump-forward: the only continuation, no sampling.
        token = -1;
        for (size_t w = 0; w < n_words && token < 0; ++w) {
          if (mask_bits_[w] != 0)
            token =
                static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(mask_bits_[w])));
        }
        ++result.n_forced_tokens;
      } else {
        // Mask: the allowed tokens (and, when complete, the stop tokens) keep their logits.
        masked_.assign(logits_.size(), -INFINITY);
        for (size_t w = 0; w < n_words; ++w) {
          for (uint64_t bits = mask_bits_[w]; bits != 0; bits &= bits - 1) {
            const size_t id = w * 64 + static_cast<size_t>(std::countr_zero(bits));
            if (id < logits_.size()) masked_[id] = logits_[id];
          }
        }
        if (complete) {
          for (int32_t id : stop_ids)
            masked_[static_cast<size_t>(id)] = logits_[static_cast<size_t>(id)];
        }
        token = sampler.Sample(masked_.data(), history_);
      }
    } else {
      token = sampler.Sample(logits_.data(), history_);
    }
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      result.stop_reason = StopReason::kEos;
      break;
    }
    if (constraint != nullptr) {
      const Stopwatch accept_watch;
      POCKET_RETURN_IF_ERROR(constraint->Accept(token));
      result.constraint_us += accept_watch.elapsed_us();
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
  if (constraint != nullptr && !constraint->Complete() &&
      result.stop_reason == StopReason::kMaxTokens) {
    return ResourceExhaustedError("the token budget of ", options.max_tokens,
                                  " ran out before the constrained output was complete (",
                                  QuoteBytes(result.text), " so far)");
  }
  if (tok != nullptr && result.stop_reason != StopReason::kStopString) emit(stream.Flush());
  result.decode_us = watch.elapsed_us();
  return result;
}

namespace {

// log softmax of logits[0..n) at `id`, with the table's log-sum-exp.
double LogProb(const KernelTable& k, const float* logits, int64_t n, int32_t id) {
  const double lse =
      k.log_sum_exp != nullptr ? k.log_sum_exp(logits, n) : reference::LogSumExp(logits, n);
  return static_cast<double>(logits[id]) - lse;
}

Status CheckCandidates(const std::vector<std::vector<int32_t>>& candidates, int32_t vocab) {
  if (candidates.empty()) return InvalidArgumentError("no candidates to score");
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (candidates[c].empty()) return InvalidArgumentError("candidate ", c, " has no tokens");
    for (int32_t id : candidates[c]) {
      if (id < 0 || id >= vocab) {
        return OutOfRangeError("candidate ", c, ": token id ", id,
                               " is outside the vocabulary (0 to ", vocab - 1, ")");
      }
    }
  }
  return Status::Ok();
}

// Totals, normalized probabilities, ranking.
std::vector<CandidateScore> Rank(std::vector<CandidateScore> scores) {
  double best = -INFINITY;
  for (CandidateScore& s : scores) {
    s.logprob = 0.0;
    for (double lp : s.token_logprobs) s.logprob += lp;
    best = std::max(best, s.logprob);
  }
  double z = 0.0;
  for (const CandidateScore& s : scores) z += std::exp(s.logprob - best);
  for (CandidateScore& s : scores) s.probability = std::exp(s.logprob - best) / z;
  std::stable_sort(
      scores.begin(), scores.end(),
      [](const CandidateScore& a, const CandidateScore& b) { return a.logprob > b.logprob; });
  return scores;
}

}  // namespace

StatusOr<std::vector<CandidateScore>> Session::Score(
    std::span<const int32_t> prompt, const std::vector<std::vector<int32_t>>& candidates) {
  const CancelScope cancel_scope(&cancel_);
  // A request that came before the call stops it even when nothing needs evaluating.
  if (cancelled()) return CancelledError("cancelled before scoring");
  const int32_t vocab = model_->config().vocab_size;
  POCKET_RETURN_IF_ERROR(CheckCandidates(candidates, vocab));
  if (prompt.empty()) return InvalidArgumentError("scoring needs a prompt of at least one token");
  // The batch: of each candidate, the tokens whose next-token distribution is needed (all but
  // its last; a one-token candidate's only log-probability comes from the prompt's logits), one
  // candidate after another in the KV slots after the prompt.
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  int64_t batch_tokens = 0;
  for (const auto& c : candidates) batch_tokens += static_cast<int64_t>(c.size()) - 1;
  if (batch_tokens > n_batch_) {
    return OutOfRangeError(candidates.size(), " candidates need ", batch_tokens,
                           " tokens evaluated, more than the prefill chunk of ", n_batch_,
                           " tokens (raise n_batch)");
  }
  if (n_prompt + batch_tokens > kv_.n_ctx()) {
    return OutOfRangeError("the prompt and the candidates take ", n_prompt + batch_tokens,
                           " positions, more than the context of ", kv_.n_ctx());
  }
  POCKET_RETURN_IF_ERROR(SetContext(prompt));
  TreeBatch batch;
  std::vector<int32_t> start(candidates.size());  // batch index of each candidate's first token
  for (size_t c = 0; c < candidates.size(); ++c) {
    const int32_t begin = static_cast<int32_t>(batch.tokens.size());
    start[c] = begin;
    for (size_t j = 0; j + 1 < candidates[c].size(); ++j) {
      batch.tokens.push_back(candidates[c][j]);
      batch.rope_pos.push_back(n_prompt + static_cast<int32_t>(j));
    }
    // Each token sees the prompt and its own candidate: the earlier candidates are hidden.
    const int32_t end = static_cast<int32_t>(batch.tokens.size());
    for (int32_t t = begin; t < end; t += 16) {
      batch.segments.push_back({t, std::min(end, t + 16), n_prompt, n_prompt + begin});
    }
  }
  if (!batch.tokens.empty()) {
    score_logits_.resize(batch.tokens.size() * static_cast<size_t>(vocab));
    POCKET_RETURN_IF_ERROR(
        PrefillTree(*model_, kv_, scratch_, *pool_, batch, n_prompt, score_logits_.data()));
  }
  std::vector<CandidateScore> scores(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    CandidateScore& s = scores[c];
    s.index = static_cast<int32_t>(c);
    s.tokens = candidates[c];
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      const float* row = j == 0 ? logits_.data()
                                : score_logits_.data() + static_cast<size_t>(start[c] + j - 1) *
                                                             static_cast<size_t>(vocab);
      s.token_logprobs.push_back(LogProb(model_->kernels(), row, vocab, s.tokens[j]));
    }
  }
  return Rank(std::move(scores));
}

StatusOr<std::vector<CandidateScore>> Session::ScoreSeparately(
    std::span<const int32_t> prompt, const std::vector<std::vector<int32_t>>& candidates) {
  const CancelScope cancel_scope(&cancel_);
  // A request that came before the call stops it even when nothing needs evaluating.
  if (cancelled()) return CancelledError("cancelled before scoring");
  const int32_t vocab = model_->config().vocab_size;
  POCKET_RETURN_IF_ERROR(CheckCandidates(candidates, vocab));
  if (prompt.empty()) return InvalidArgumentError("scoring needs a prompt of at least one token");
  POCKET_RETURN_IF_ERROR(SetContext(prompt));
  const std::vector<float> first = logits_;
  std::vector<CandidateScore> scores(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    history_.resize(prompt.size());  // back to the prompt: its KV rows stay valid
    // As Score: every token but the last is evaluated (its successor's distribution is needed).
    const std::span<const int32_t> needed(candidates[c].data(), candidates[c].size() - 1);
    score_logits_.resize(needed.size() * static_cast<size_t>(vocab));
    if (!needed.empty()) POCKET_RETURN_IF_ERROR(Append(needed, score_logits_.data()));
    CandidateScore& s = scores[c];
    s.index = static_cast<int32_t>(c);
    s.tokens = candidates[c];
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      const float* row =
          j == 0 ? first.data() : score_logits_.data() + (j - 1) * static_cast<size_t>(vocab);
      s.token_logprobs.push_back(LogProb(model_->kernels(), row, vocab, s.tokens[j]));
    }
  }
  history_.resize(prompt.size());
  logits_ = first;
  logits_at_ = prompt.size();
  return Rank(std::move(scores));
}

StatusOr<std::vector<LabelScore>> Session::Classify(std::span<const int32_t> prompt) {
  const CancelScope cancel_scope(&cancel_);
  if (cancelled()) return CancelledError("cancelled before classifying");
  const ClassifierHead& head = model_->classifier();
  if (!head.present()) {
    return FailedPreconditionError(
        model_->source().path(), " has no classification head (tensor ", kClassifierTensor,
        " with its labels); add one with pocket convert --classifier-head FILE "
        "--classifier-labels a,b,c, or score --candidates");
  }
  if (prompt.empty()) {
    return InvalidArgumentError("classification needs a prompt of at least one token");
  }
  if (prompt.size() > static_cast<size_t>(kv_.n_ctx())) {
    return OutOfRangeError("the prompt is ", prompt.size(), " tokens, longer than the context of ",
                           kv_.n_ctx(), " tokens");
  }
  // Keep the KV rows of the common prefix, but evaluate at least the last token: its hidden state
  // is not kept between calls.
  size_t common = 0;
  while (common < history_.size() && common < prompt.size() && history_[common] == prompt[common]) {
    ++common;
  }
  common = std::min(common, prompt.size() - 1);
  history_.resize(common);
  logits_at_ = 0;  // no logits are computed: last_logits() belong to no context now
  const std::span<const int32_t> rest = prompt.subspan(common);
  for (size_t done = 0; done < rest.size();) {
    if (cancelled()) return CancelledError("cancelled during prefill after ", done, " tokens");
    const size_t n = std::min(rest.size() - done, static_cast<size_t>(n_batch_));
    const int32_t pos = static_cast<int32_t>(history_.size());
    const std::span<const int32_t> chunk = rest.subspan(done, n);
    // Earlier chunks only fill the KV cache; the last one also yields the hidden state.
    const Status s = done + n == rest.size()
                         ? PrefillHidden(*model_, kv_, scratch_, *pool_, chunk, pos, hidden_.data())
                         : Prefill(*model_, kv_, scratch_, *pool_, chunk, pos, false, nullptr);
    if (!s.ok()) return s;
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    done += n;
  }
  const size_t d = static_cast<size_t>(head.d_model);
  std::vector<LabelScore> scores(head.labels.size());
  double best = -INFINITY;
  for (size_t i = 0; i < scores.size(); ++i) {
    const float* row = head.weight.data() + i * d;
    double logit = 0.0;
    for (size_t j = 0; j < d; ++j) logit += static_cast<double>(row[j]) * hidden_[j];
    scores[i].index = static_cast<int32_t>(i);
    scores[i].label = head.labels[i];
    scores[i].logit = logit;
    best = std::max(best, logit);
  }
  double z = 0.0;
  for (const LabelScore& s : scores) z += std::exp(s.logit - best);
  const double log_z = best + std::log(z);
  for (LabelScore& s : scores) {
    s.logprob = s.logit - log_z;
    s.probability = std::exp(s.logprob);
  }
  std::stable_sort(scores.begin(), scores.end(),
                   [](const LabelScore& a, const LabelScore& b) { return a.logit > b.logit; });
  return scores;
}

}  // namespace pocket
