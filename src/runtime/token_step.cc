#include "runtime/token_step.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/timer.h"

namespace pocket {

TokenStep::TokenStep(const Model& model, const GenerateOptions& options,
                     const StreamCallback& on_text, GenerateResult* result,
                     std::vector<float>* masked, std::vector<uint64_t>* mask_bits, int32_t room)
    : model_(model),
      tok_(model.tokenizer()),
      on_text_(on_text),
      result_(result),
      constraint_(options.constraint),
      partial_constrained_output_(options.partial_constrained_output),
      sampler_(options.sampling, model.config().vocab_size),
      stream_(model.tokenizer(), options.stop_strings),
      masked_(masked),
      mask_bits_(mask_bits),
      ignore_stop_tokens_(options.ignore_stop_tokens && options.constraint == nullptr),
      logprobs_(options.drafter == nullptr ? std::min(options.logprobs, 20) : -1) {
  // Room for the whole output up front, so the loop appends without allocating (a token's text
  // is a few bytes; an output that outgrows this grows geometrically, not per token). Never more
  // than the context can hold: "no limit" must not reserve gigabytes.
  const size_t budget = static_cast<size_t>(std::clamp(options.max_tokens, 0, std::max(room, 0)));
  result_->tokens.reserve(budget);
  result_->text.reserve(budget * 8);
  stream_.Reserve(budget * 8);
  piece_.reserve(64);
  masked_->reserve(static_cast<size_t>(model.config().vocab_size));
  if (constraint_ != nullptr) constraint_->Reset();
  result_->stop_reason = StopReason::kMaxTokens;
}

StatusOr<int32_t> TokenStep::Choose(std::span<const float> logits,
                                    std::span<const int32_t> history) {
  StatusOr<int32_t> token = ChooseWith(logits, [&](auto l) { return sampler_.Sample(l, history); });
  if (logprobs_ >= 0 && token.ok() && *token >= 0) RecordLogprobs(logits, *token);
  return token;
}

void TokenStep::RecordLogprobs(std::span<const float> logits, int32_t token) {
  float max = -INFINITY;
  for (float l : logits) max = std::max(max, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  const float lse = max + static_cast<float>(std::log(sum));
  TokenLogprobs entry;
  entry.token = token;
  entry.logprob = static_cast<size_t>(token) < logits.size() ? logits[token] - lse : -INFINITY;
  // The top logprobs_ by a running insertion (k <= 20), ties to the lower id.
  const size_t k = static_cast<size_t>(logprobs_);
  std::vector<std::pair<int32_t, float>>& top = entry.top;
  top.reserve(k + 1);
  for (size_t i = 0; i < logits.size() && k > 0; ++i) {
    const float l = logits[i];
    if (top.size() == k && !(l > top.back().second)) continue;
    auto at = std::find_if(top.begin(), top.end(), [&](const auto& e) { return l > e.second; });
    top.insert(at, {static_cast<int32_t>(i), l});
    if (top.size() > k) top.pop_back();
  }
  for (auto& e : top) e.second -= lse;
  result_->logprobs.push_back(std::move(entry));
}

StatusOr<int32_t> TokenStep::ChooseDraft(std::span<const float> logits,
                                         std::span<const int32_t> history, int32_t draft,
                                         std::span<const float> q) {
  return ChooseWith(logits, [&](auto l) { return sampler_.SampleDraft(l, history, draft, q); });
}

StatusOr<size_t> TokenStep::LegalPrefix(std::span<const int32_t> draft) {
  const std::vector<int32_t>& stop_ids = model_.stop_token_ids();
  size_t n = 0;
  size_t accepted = 0;
  Status status = Status::Ok();
  for (; n < draft.size(); ++n) {
    const int32_t token = draft[n];
    const bool stop = !ignore_stop_tokens_ &&
                      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
    if (constraint_ != nullptr) {
      if (stop) {
        if (!constraint_->Complete()) break;
      } else {
        const size_t n_allowed = constraint_->AllowedMask(mask_bits_);
        const std::vector<uint64_t>& bits = *mask_bits_;
        const size_t word = static_cast<size_t>(token) / 64;
        if (n_allowed == 0 || token < 0 || word >= bits.size() ||
            ((bits[word] >> (static_cast<size_t>(token) % 64)) & 1u) == 0) {
          break;
        }
        status = constraint_->Accept(token);
        if (!status.ok()) break;
        ++accepted;
      }
    }
    if (stop) {
      ++n;  // the stop token itself may be verified; nothing after it
      break;
    }
  }
  if (constraint_ != nullptr) POCKET_RETURN_IF_ERROR(constraint_->Rollback(accepted));
  POCKET_RETURN_IF_ERROR(status);
  return n;
}

template <typename Pick>
StatusOr<int32_t> TokenStep::ChooseWith(std::span<const float> logits, const Pick& pick) {
  if (constraint_ == nullptr) return pick(logits);
  // Constraint mask: the allowed tokens (and, when the output is complete, the stop tokens).
  const Stopwatch mask_watch;
  const size_t n_allowed = constraint_->AllowedMask(mask_bits_);
  const bool complete = constraint_->Complete();
  result_->constraint_us += mask_watch.elapsed_us();
  ++result_->n_masks;
  if (n_allowed == 0) {
    POCKET_RETURN_IF_ERROR(constraint_->error());
    if (!complete) return InternalError("the constraint allows no token and is not complete");
    result_->stop_reason = StopReason::kEos;  // nothing can extend a complete output
    return -1;
  }
  const std::vector<uint64_t>& bits = *mask_bits_;
  const size_t n_words = std::min(bits.size(), (logits.size() + 63) / 64);
  if (n_allowed == 1 && !complete) {
    // Jump-forward: the only continuation, no sampling.
    ++result_->n_forced_tokens;
    for (size_t w = 0; w < n_words; ++w) {
      if (bits[w] != 0) {
        return static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits[w])));
      }
    }
    return InternalError("the constraint's mask and count disagree");
  }
  std::vector<float>& masked = *masked_;
  masked.assign(logits.size(), -INFINITY);
  for (size_t w = 0; w < n_words; ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      const size_t id = w * 64 + static_cast<size_t>(std::countr_zero(word));
      if (id < logits.size()) masked[id] = logits[id];
    }
  }
  if (complete) {
    for (int32_t id : model_.stop_token_ids())
      masked[static_cast<size_t>(id)] = logits[static_cast<size_t>(id)];
  }
  // The masked copy is the session's scratch: the sampler may modify it.
  return pick(masked.data());
}

StatusOr<bool> TokenStep::Accept(int32_t token) {
  const std::vector<int32_t>& stop_ids = model_.stop_token_ids();
  if (!ignore_stop_tokens_ &&
      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    result_->stop_reason = StopReason::kEos;
    return false;
  }
  if (constraint_ != nullptr) {
    const Stopwatch accept_watch;
    POCKET_RETURN_IF_ERROR(constraint_->Accept(token));
    result_->constraint_us += accept_watch.elapsed_us();
  }
  result_->tokens.push_back(token);
  if (tok_ == nullptr) return true;
  const bool hit_stop = stream_.Push(token, &piece_);
  Emit(piece_);
  if (hit_stop) {
    result_->stop_reason = StopReason::kStopString;
    return false;
  }
  if (!keep_going_) {
    result_->stop_reason = StopReason::kCallback;
    return false;
  }
  return true;
}

void TokenStep::Emit(const std::string& piece) {
  if (piece.empty() || !keep_going_) return;
  result_->text += piece;
  if (on_text_ && !on_text_(piece)) keep_going_ = false;
}

Status TokenStep::Finish(int32_t max_tokens) {
  if (constraint_ != nullptr && !constraint_->Complete() &&
      result_->stop_reason == StopReason::kMaxTokens && !partial_constrained_output_) {
    return ResourceExhaustedError("the token budget of ", max_tokens,
                                  " ran out before the constrained output was complete (",
                                  QuoteBytes(result_->text), " so far)");
  }
  if (tok_ != nullptr && result_->stop_reason != StopReason::kStopString) Emit(stream_.Flush());
  return Status::Ok();
}

}  // namespace pocket
