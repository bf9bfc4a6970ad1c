#include <algorithm>
#include <cmath>

#include "runtime/session.h"

namespace pocket {

namespace {

// log softmax of logits[0..n) at `id`, with the table's log-sum-exp.
double LogProb(const KernelTable& k, const float* logits, int64_t n, int32_t id) {
  const double lse = LogSumExp(k, logits, n);
  return static_cast<double>(logits[id]) - lse;
}

}  // namespace

double CandidateLogProb(const KernelTable& kernels, const float* logits, int64_t vocab,
                        int32_t id) {
  return LogProb(kernels, logits, vocab, id);
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
std::vector<CandidateScore> RankCandidates(std::vector<CandidateScore> scores) {
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
  // One segment per candidate, in the KV slots after the prompt one after another; RoPE positions
  // restart after the prompt, and each candidate hides the slots of those before it.
  std::vector<int32_t> tokens;
  std::vector<BatchSegment> segments;
  std::vector<int32_t> start(candidates.size());  // batch row of each candidate's first token
  for (size_t c = 0; c < candidates.size(); ++c) {
    const int32_t begin = static_cast<int32_t>(tokens.size());
    start[c] = begin;
    tokens.insert(tokens.end(), candidates[c].begin(), candidates[c].end() - 1);
    const int32_t end = static_cast<int32_t>(tokens.size());
    if (end == begin) continue;
    BatchSegment seg{&kv_, begin, end, n_prompt + begin, n_prompt};
    seg.hidden_begin = n_prompt;
    seg.hidden_end = n_prompt + begin;
    seg.adapters = &adapters_;
    segments.push_back(seg);
  }
  if (!tokens.empty()) {
    score_logits_.resize(tokens.size() * static_cast<size_t>(vocab));
    ForwardBatch batch;
    batch.tokens = tokens;
    batch.segments = segments;
    batch.output_rows = scratch_.rows(0, static_cast<int32_t>(tokens.size()));
    batch.logits = score_logits_.data();
    POCKET_RETURN_IF_ERROR(Forward(*model_, scratch_, *pool_, batch));
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
  return RankCandidates(std::move(scores));
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
    Truncate(prompt.size());  // back to the prompt: its KV rows stay valid
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
  Truncate(prompt.size());
  logits_ = first;
  logits_at_ = prompt.size();
  return RankCandidates(std::move(scores));
}

const ClassifierHead& Session::classifier() const {
  const ClassifierHead* task = nullptr;
  for (const AdapterUse& u : adapters_) {
    if (u.adapter->classifier().present()) task = &u.adapter->classifier();
  }
  return task != nullptr ? *task : model_->classifier();
}

Status Session::CheckClassifier() const {
  if (classifier().present()) return Status::Ok();
  return FailedPreconditionError(
      model_->source().path(), " has no classification head (tensor ", kClassifierTensor,
      " with its labels) and neither do its adapters; add one with pocket convert "
      "--classifier-head FILE --classifier-labels a,b,c (to the model, or with --lora to an "
      "adapter package), or score --candidates");
}

std::vector<LabelScore> ScoreLabels(const ClassifierHead& head, const float* hidden) {
  const size_t d = static_cast<size_t>(head.d_model);
  std::vector<LabelScore> scores(head.labels.size());
  double best = -INFINITY;
  for (size_t i = 0; i < scores.size(); ++i) {
    const float* row = head.weight.data() + i * d;
    double logit = 0.0;
    for (size_t j = 0; j < d; ++j) logit += static_cast<double>(row[j]) * hidden[j];
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

StatusOr<std::vector<LabelScore>> Session::Classify(std::span<const int32_t> prompt) {
  const CancelScope cancel_scope(&cancel_);
  if (cancelled()) return CancelledError("cancelled before classifying");
  POCKET_RETURN_IF_ERROR(CheckClassifier());
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
  Truncate(common);
  logits_at_ = 0;  // no logits are computed: last_logits() belong to no context now
  const std::span<const int32_t> rest = prompt.subspan(common);
  for (size_t done = 0; done < rest.size();) {
    if (cancelled()) return CancelledError("cancelled during prefill after ", done, " tokens");
    const size_t n = std::min(rest.size() - done, static_cast<size_t>(n_batch_));
    const std::span<const int32_t> chunk = rest.subspan(done, n);
    // Earlier chunks only fill the KV cache; the last one also yields the hidden state.
    const int32_t rows = static_cast<int32_t>(n);
    POCKET_RETURN_IF_ERROR(done + n == rest.size() ? Evaluate(chunk, scratch_.rows(rows - 1, rows),
                                                              nullptr, hidden_.data())
                                                   : Evaluate(chunk, {}, nullptr, nullptr));
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    done += n;
  }
  return ScoreLabels(classifier(), hidden_.data());
}

}  // namespace pocket
