// Speculative decoding: a driver of the token steps (token_step.h) that verifies drafted tokens.
//
// A pending token p (chosen, accepted, not yet in the KV cache) and a draft d1..dk go through the
// target in ONE forward pass, [p, d1..dk] with logits for every row. Row i's logits are those
// plain decoding would see after p, d1..di, so the steps run on them in order: Choose picks t_i
// with the target's own sampler chain (and its constraint mask and RNG, consumed exactly as plain
// decoding consumes them), Accept takes it; while t_i equals d_{i+1}, that token is already in the
// cache and the next row follows; at the first difference t_i becomes the next pending token and
// the KV rows after p, d1..di are dropped (the history is truncated: constant time). The emitted
// tokens are therefore exactly plain decoding's, for greedy and sampled decoding alike, with any
// deterministic drafter; what a draft changes is only how many target passes they take.
#include <algorithm>

#include "runtime/session.h"
#include "runtime/token_step.h"

namespace pocket {

Status Session::DecodeSpeculative(TokenStep& step, const GenerateOptions& options,
                                  GenerateResult* result) {
  if (options.draft_max < 1) return InvalidArgumentError("draft_max must be at least 1");
  const int32_t vocab = model_->config().vocab_size;
  const size_t n_ctx = static_cast<size_t>(kv_.n_ctx());
  const int32_t draft_max = std::min(options.draft_max, n_batch_ - 1);
  spec_context_.reserve(n_ctx + 1);
  spec_rows_.reserve(static_cast<size_t>(draft_max) + 1);
  spec_logits_.resize(static_cast<size_t>(draft_max + 1) * static_cast<size_t>(vocab));
  std::vector<int32_t> draft;
  draft.reserve(static_cast<size_t>(draft_max));

  int32_t emitted = 0;
  // One plain step on the logits at hand (after the prompt); false when generation stops.
  auto step_on = [&](std::span<const float> logits, size_t history_size) -> StatusOr<int32_t> {
    if (cancelled()) {
      result->stop_reason = StopReason::kCancelled;
      return -1;
    }
    POCKET_ASSIGN_OR_RETURN(
        const int32_t token,
        step.Choose(logits, std::span<const int32_t>(history_.data(), history_size)));
    if (token < 0) return -1;
    POCKET_ASSIGN_OR_RETURN(const bool go_on, step.Accept(token));
    if (!go_on) return -1;
    ++emitted;
    if (history_size >= n_ctx) {
      result->stop_reason = StopReason::kContextFull;
      return -1;
    }
    // The last token of the budget needs no forward pass: nothing samples from its logits.
    if (emitted == options.max_tokens) return -1;
    return token;
  };
  if (options.max_tokens == 0) return Status::Ok();
  POCKET_ASSIGN_OR_RETURN(int32_t pending, step_on(logits_, history_.size()));
  while (pending >= 0) {
    // Draft after the context the pending token completes, within the budget (k drafted tokens
    // can emit k + 1), the context and the prefill chunk.
    spec_context_.assign(history_.begin(), history_.end());
    spec_context_.push_back(pending);
    const int32_t room = static_cast<int32_t>(
        std::min<size_t>(n_ctx - history_.size() - 1, static_cast<size_t>(draft_max)));
    const int32_t k_max = std::min(room, options.max_tokens - emitted - 1);
    draft.clear();
    if (k_max > 0) {
      POCKET_RETURN_IF_ERROR(options.drafter->Draft(spec_context_, k_max, &draft));
      if (static_cast<int32_t>(draft.size()) > k_max) draft.resize(static_cast<size_t>(k_max));
    }
    spec_rows_.assign(1, pending);
    spec_rows_.insert(spec_rows_.end(), draft.begin(), draft.end());
    const size_t base = history_.size();  // the pending token's slot
    const Status s = Append(spec_rows_, spec_logits_.data());
    if (s.code() == StatusCode::kCancelled) {
      result->stop_reason = StopReason::kCancelled;
      return Status::Ok();
    }
    POCKET_RETURN_IF_ERROR(s);
    ++result->n_verify_passes;
    result->n_drafted += static_cast<int32_t>(draft.size());
    // Rows in order; row i's logits follow p, d1..di (history of base + 1 + i tokens).
    int32_t next = -1;
    size_t kept = base + 1;
    for (size_t i = 0; i < spec_rows_.size(); ++i) {
      kept = base + 1 + i;
      const std::span<const float> row(spec_logits_.data() + i * static_cast<size_t>(vocab),
                                       static_cast<size_t>(vocab));
      POCKET_ASSIGN_OR_RETURN(const int32_t token, step_on(row, kept));
      if (token < 0) break;
      if (i < draft.size() && token == draft[i]) {
        ++result->n_draft_accepted;
        continue;  // already in the cache: the next row follows it
      }
      next = token;
      break;
    }
    // Drop the KV rows of rejected drafts; the logits at hand are those after the kept history.
    history_.resize(kept);
    const size_t row = kept - base - 1;
    std::copy_n(spec_logits_.data() + row * static_cast<size_t>(vocab), vocab, logits_.data());
    logits_at_ = kept;
    pending = next;
  }
  return Status::Ok();
}

}  // namespace pocket
