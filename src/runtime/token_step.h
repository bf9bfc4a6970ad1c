// The token-step pipeline of generation: what happens to one position's logits, stage by stage,
//
//   logits ──► constraint mask ──► sampler ──► accept ──► stop checks ──► stream
//              (jump-forward when   (on a copy:  (stop tokens,  (stop strings,    (text pieces,
//               one token is left)   the cached   the constraint) the callback)     whole chars)
//                                    logits stay)
//
// Session::Generate is a prefiller (the prompt into the KV cache) followed by a loop of
// Choose → Accept → Session::Append. A speculative verifier is another driver of the same steps:
// it evaluates [last, d1..dk] in one forward pass, runs Choose on each row's logits, Accepts while
// the choice equals the draft, and rolls the KV cache and the constraint (Constraint::Rollback)
// back past the first disagreement. Nothing here allocates per token once set up.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "generate/constraint.h"
#include "generate/sampler.h"
#include "model/model.h"
#include "runtime/generate_types.h"
#include "runtime/text_stream.h"

namespace pocket {

class TokenStep {
 public:
  // `result` receives tokens, text and counters; `masked` and `mask_bits` are reusable buffers
  // (a session's), grown once. `room` is the most tokens the context can still produce (the
  // output is reserved for min(max_tokens, room): max_tokens may be kNoTokenLimit).
  TokenStep(const Model& model, const GenerateOptions& options, const StreamCallback& on_text,
            GenerateResult* result, std::vector<float>* masked, std::vector<uint64_t>* mask_bits,
            int32_t room);

  // The next token from the logits after `history` (never modified). Returns -1 when nothing can
  // extend a complete constrained output (the result's stop reason is then set: kEos).
  StatusOr<int32_t> Choose(std::span<const float> logits, std::span<const int32_t> history);
  // The same for a row that verifies `draft`, sampled by a drafter from q ([vocab]): the draft
  // when the rule min(1, p/q) keeps it, else a token from the residual (Sampler::SampleDraft), so
  // the token is distributed as Choose's. p includes the constraint mask.
  StatusOr<int32_t> ChooseDraft(std::span<const float> logits, std::span<const int32_t> history,
                                int32_t draft, std::span<const float> q);

  // How many leading tokens of `draft` the constraint allows in sequence (all without one), and
  // not past a stop token (it ends generation: nothing after it is needed). The constraint is
  // left as it was. Drafts are cut to this before verification.
  StatusOr<size_t> LegalPrefix(std::span<const int32_t> draft);

  // Takes a chosen token through the stop checks and the stream: true to go on, false when
  // generation stops here (the stop reason is set). A stop token ends generation without being
  // kept.
  StatusOr<bool> Accept(int32_t token);

  // The context's last token, before the first token is chosen (the text continues it).
  void Follow(int32_t token) { stream_.Follow(token); }
  // At the end: a constrained output cut by the budget is an error (ResourceExhausted); what the
  // stream held back is emitted.
  Status Finish(int32_t max_tokens);

 private:
  void Emit(const std::string& piece);
  // Appends token's entry to result_->logprobs (log-softmax of `logits`, top logprobs_).
  void RecordLogprobs(std::span<const float> logits, int32_t token);
  // Choose's body: `pick` samples from logits (the span or a masked copy it may modify).
  template <typename Pick>
  StatusOr<int32_t> ChooseWith(std::span<const float> logits, const Pick& pick);

  const Model& model_;
  const Tokenizer* tok_;
  const StreamCallback& on_text_;
  GenerateResult* result_;
  Constraint* constraint_;
  bool partial_constrained_output_;
  Sampler sampler_;
  TextStream stream_;
  std::string piece_;  // reused: the text a token made showable
  std::vector<float>* masked_;
  std::vector<uint64_t>* mask_bits_;
  bool keep_going_ = true;
  bool ignore_stop_tokens_ = false;  // GenerateOptions::ignore_stop_tokens (no constraint)
  int32_t logprobs_ = -1;            // GenerateOptions::logprobs (-1 with a drafter)
};

}  // namespace pocket
