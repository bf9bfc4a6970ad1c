// The engine's batched scoring (Engine::SubmitScore): Session::Score's computation, its prompt
// prefilled in chunks and its candidates evaluated a group a step, beside the other requests'
// rows, so that scoring a long prompt never stalls the streams for the whole of it.
#include <algorithm>
#include <utility>

#include "runtime/engine.h"
#include "runtime/engine_request.h"

namespace pocket {

StatusOr<int64_t> Engine::SubmitScore(Session* session, std::span<const int32_t> prompt,
                                      std::vector<std::vector<int32_t>> candidates, int32_t chunk) {
  if (session == nullptr) return InvalidArgumentError("no session");
  if (chunk < 0) return InvalidArgumentError("the scoring chunk must be >= 0, got ", chunk);
  if (chunk == 0 || chunk > session->n_batch_) chunk = session->n_batch_;
  const int32_t vocab = model_->config().vocab_size;
  POCKET_RETURN_IF_ERROR(CheckCandidates(candidates, vocab));
  for (size_t c = 0; c < candidates.size(); ++c) {
    const size_t rows = candidates[c].size() - 1;
    if (rows > static_cast<size_t>(session->n_batch_)) {
      return OutOfRangeError("candidate ", c, " has ", candidates[c].size(),
                             " tokens; a step evaluates at most ", session->n_batch_ + 1,
                             " (the session's prefill chunk + 1)");
    }
    if (prompt.size() + rows > static_cast<size_t>(session->kv_.n_ctx())) {
      return OutOfRangeError("the prompt and candidate ", c, " take ", prompt.size() + rows,
                             " positions, more than the context of ", session->kv_.n_ctx());
    }
  }
  GenerateOptions options;
  options.max_tokens = 0;
  options.sampling.temperature = 0.0f;
  POCKET_ASSIGN_OR_RETURN(const int64_t id, Submit(session, prompt, options));
  // Room for a group's rows beside one row per request, and their segments (here, not per step):
  // a group holds `chunk` rows, or one longer candidate alone.
  size_t longest = 0;
  for (const auto& c : candidates) longest = std::max(longest, c.size() - 1);
  const size_t rows =
      static_cast<size_t>(options_.max_requests) + std::max(static_cast<size_t>(chunk), longest);
  if (logits_.size() < rows * static_cast<size_t>(vocab)) {
    logits_.resize(rows * static_cast<size_t>(vocab));
  }
  out_rows_.reserve(rows);
  segments_.reserve(static_cast<size_t>(options_.max_requests) + candidates.size());
  Request& r = *requests_.back();
  r.scoring = true;
  r.chunk = chunk;
  r.scores.resize(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    r.scores[c].index = static_cast<int32_t>(c);
    r.scores[c].tokens = candidates[c];
    r.scores[c].token_logprobs.reserve(candidates[c].size());
  }
  r.candidates = std::move(candidates);
  return id;
}

void Engine::BeginScores(Request& r) {
  const Session& s = *r.session;
  const int64_t vocab = model_->config().vocab_size;
  size_t rows = 0;
  for (size_t c = 0; c < r.candidates.size(); ++c) {
    // A candidate's first token from the prompt's logits (a one-token candidate's only one).
    r.scores[c].token_logprobs.push_back(
        CandidateLogProb(model_->kernels(), s.logits_.data(), vocab, r.candidates[c][0]));
    rows += r.candidates[c].size() - 1;
  }
  r.result.prefill_us = r.watch.elapsed_us();
  r.watch.Reset();
  r.next_candidate = 0;
  r.phase = Request::Phase::kScore;
  if (rows == 0) {
    r.scores = RankCandidates(std::move(r.scores));
    Finish(r, false);
  }
}

int32_t Engine::NextScoreGroup(Request& r) {
  const Session& s = *r.session;
  const int32_t budget = std::min(static_cast<int32_t>(ChunkOf(r)),
                                  s.kv_.n_ctx() - static_cast<int32_t>(s.history_.size()));
  int32_t rows = 0;
  size_t c = r.next_candidate;
  for (; c < r.candidates.size(); ++c) {
    const int32_t k = static_cast<int32_t>(r.candidates[c].size()) - 1;
    if (rows + k > budget && c > r.next_candidate) break;
    rows += k;
  }
  r.group_end = c;
  return rows;
}

void Engine::AppendScoreGroup(Request& r) {
  Session& s = *r.session;
  // As Session::Score: each candidate in the KV slots after the prompt, one after another, its
  // RoPE positions restarting after the prompt, the slots of those before it hidden.
  const int32_t n_prompt = static_cast<int32_t>(s.history_.size());
  int32_t offset = 0;
  for (size_t c = r.next_candidate; c < r.group_end; ++c) {
    const std::vector<int32_t>& tokens = r.candidates[c];
    const int32_t k = static_cast<int32_t>(tokens.size()) - 1;
    if (k == 0) continue;
    const int32_t begin = static_cast<int32_t>(tokens_.size());
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end() - 1);
    BatchSegment seg{&s.kv_, begin, begin + k, n_prompt + offset, n_prompt};
    seg.hidden_begin = n_prompt;
    seg.hidden_end = n_prompt + offset;
    seg.adapters = &s.adapters_;
    segments_.push_back(seg);
    for (int32_t row = begin; row < begin + k; ++row) out_rows_.push_back(row);
    offset += k;
  }
}

void Engine::ReadScoreGroup(Request& r, const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  size_t row = 0;
  for (size_t c = r.next_candidate; c < r.group_end; ++c) {
    const std::vector<int32_t>& tokens = r.candidates[c];
    for (size_t j = 1; j < tokens.size(); ++j, ++row) {
      r.scores[c].token_logprobs.push_back(CandidateLogProb(
          model_->kernels(), logits + row * static_cast<size_t>(vocab), vocab, tokens[j]));
    }
  }
  r.next_candidate = r.group_end;
  if (r.next_candidate == r.candidates.size()) {
    r.result.decode_us = r.watch.elapsed_us();
    r.scores = RankCandidates(std::move(r.scores));
    Finish(r, false);
  }
}

StatusOr<int64_t> Engine::SubmitClassify(Session* session, std::span<const int32_t> prompt,
                                         int32_t chunk) {
  if (session == nullptr) return InvalidArgumentError("no session");
  if (chunk < 0) return InvalidArgumentError("the classifying chunk must be >= 0, got ", chunk);
  POCKET_RETURN_IF_ERROR(session->CheckClassifier());
  if (chunk == 0 || chunk > session->n_batch_) chunk = session->n_batch_;
  const size_t d = static_cast<size_t>(model_->config().d_model);
  if (hidden_.size() < static_cast<size_t>(options_.max_requests) * d) {
    hidden_.resize(static_cast<size_t>(options_.max_requests) * d);
  }
  GenerateOptions options;
  options.max_tokens = 0;
  options.sampling.temperature = 0.0f;
  POCKET_ASSIGN_OR_RETURN(const int64_t id, Submit(session, prompt, options));
  Request& r = *requests_.back();
  r.classifying = true;
  r.chunk = chunk;
  if (r.at == r.prompt.size()) {
    // The whole prompt was the context, with its logits: the last token is evaluated again for
    // its hidden state (not kept between calls), as Classify does.
    r.at = r.start = r.prompt.size() - 1;
    session->Truncate(r.at);
    r.phase = Request::Phase::kPrefill;
  }
  return id;
}

StatusOr<std::vector<LabelScore>> Engine::TakeLabels(int64_t id) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Remove(id, Kind::kClassify));
  if (!r->status.ok()) return r->status;
  return std::move(r->labels);
}

}  // namespace pocket
