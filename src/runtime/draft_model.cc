#include "runtime/draft_model.h"

#include <algorithm>
#include <cmath>

namespace pocket {

Status CheckSameVocabulary(const Model& target, const Model& draft) {
  const int32_t n_target = target.config().vocab_size;
  const int32_t n_draft = draft.config().vocab_size;
  if (n_target != n_draft) {
    return InvalidArgumentError("the draft model's vocabulary has ", n_draft,
                                " tokens, the target's ", n_target,
                                ": a drafter must use the target's vocabulary");
  }
  const Tokenizer* a = target.tokenizer();
  const Tokenizer* b = draft.tokenizer();
  // Models without tokenizers (token ids in, token ids out) can only compare sizes; with one on
  // one side only, the tables cannot be compared, and another vocabulary of the same size would
  // draft nonsense the target rejects at every token.
  if (a == nullptr && b == nullptr) return Status::Ok();
  if (b == nullptr) {
    return InvalidArgumentError(
        "the draft model has no tokenizer, so its vocabulary cannot be compared with the "
        "target's token by token (convert it with the target's: pocket convert DRAFT --tokenizer "
        "tokenizer.json -o draft.pocket)");
  }
  if (a == nullptr) {
    return InvalidArgumentError(
        "the target has no tokenizer but the draft model has one: the vocabularies cannot be "
        "compared (load the target with --tokenizer)");
  }
  const int32_t n = std::min(a->vocab_size(), b->vocab_size());
  for (int32_t id = 0; id < n; ++id) {
    if (a->TokenBytes(id) != b->TokenBytes(id)) {
      return InvalidArgumentError(
          "the draft model's vocabulary differs from the target's at token ", id, ": ",
          QuoteBytes(b->TokenBytes(id)), " in the draft, ", QuoteBytes(a->TokenBytes(id)),
          " in the target");
    }
    if (a->IsSpecial(id) != b->IsSpecial(id)) {
      return InvalidArgumentError(
          "the draft model's vocabulary differs from the target's at token ", id, " (",
          QuoteBytes(a->TokenBytes(id)), "): a special token in ",
          a->IsSpecial(id) ? "the target" : "the draft", ", text in the other");
    }
  }
  if (a->vocab_size() != b->vocab_size()) {
    return InvalidArgumentError("the draft model's tokenizer has ", b->vocab_size(),
                                " tokens, the target's ", a->vocab_size());
  }
  return Status::Ok();
}

Status DraftModelOptions::Validate() const {
  if (!(p_min >= 0.0f && p_min <= 1.0f)) {
    return InvalidArgumentError("--draft-p-min must be in [0, 1], got ", p_min);
  }
  if (!(temperature >= 0.0f) || temperature > 100.0f) {
    return InvalidArgumentError("the draft temperature must be in [0, 100], got ", temperature);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::Create(
    std::shared_ptr<const Model> draft, const Model& target, const DraftModelOptions& options) {
  POCKET_RETURN_IF_ERROR(options.Validate());
  if (!draft) return InvalidArgumentError("no draft model");
  POCKET_RETURN_IF_ERROR(CheckSameVocabulary(target, *draft));
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                          Session::Create(std::move(draft), options.session));
  return std::unique_ptr<DraftModelDrafter>(new DraftModelDrafter(std::move(session), options));
}

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<Session> session,
                                     const DraftModelOptions& options)
    : session_(std::move(session)),
      options_(options),
      rng_(options.seed ^ 0x6472616674ull),  // "draft": a stream apart from the target's
      row_(static_cast<size_t>(session_->model().config().vocab_size)) {}

Status DraftModelDrafter::Draft(std::span<const int32_t> context, int32_t max_tokens,
                                std::vector<int32_t>* draft) {
  draft->clear();
  if (max_tokens <= 0 || context.empty()) return Status::Ok();
  // Past the draft model's context there is nothing to propose (not an error: plain decoding).
  if (context.size() + static_cast<size_t>(max_tokens) > static_cast<size_t>(session_->n_ctx())) {
    return Status::Ok();
  }
  POCKET_RETURN_IF_ERROR(session_->SetContext(context));
  const size_t vocab = row_.size();
  const bool sample = sampled();
  if (sample && probs_.size() < static_cast<size_t>(max_tokens) * vocab) {
    // Grows to the longest draft asked for (16 rows at first: the usual draft_max fits), once.
    probs_.resize(static_cast<size_t>(std::max(max_tokens, 16)) * vocab);
  }
  const float inv_t = sample ? 1.0f / options_.temperature : 1.0f;
  for (int32_t i = 0; i < max_tokens; ++i) {
    const std::span<const float> logits = session_->last_logits();
    if (!sample && options_.p_min <= 0.0f) {
      // Greedy without a threshold: the argmax alone.
      const int32_t token =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      draft->push_back(token);
      if (i + 1 < max_tokens) {
        POCKET_RETURN_IF_ERROR(session_->Append(std::span<const int32_t>(&token, 1)));
      }
      continue;
    }
    // q = softmax(logits / T) (T = 1 for the p_min test of greedy drafts).
    float max_logit = logits[0];
    size_t best = 0;
    for (size_t t = 1; t < vocab; ++t) {
      if (logits[t] > max_logit) {
        max_logit = logits[t];
        best = t;
      }
    }
    double sum = 0.0;
    for (size_t t = 0; t < vocab; ++t) {
      row_[t] = std::exp((logits[t] - max_logit) * inv_t);
      sum += row_[t];
    }
    if (static_cast<double>(row_[best]) / sum < options_.p_min) break;  // unsure: stop here
    int32_t token = static_cast<int32_t>(best);
    if (sample) {
      float* q = probs_.data() + static_cast<size_t>(i) * vocab;
      const float inv_sum = static_cast<float>(1.0 / sum);
      for (size_t t = 0; t < vocab; ++t) q[t] = row_[t] * inv_sum;
      const double r = rng_.NextDouble() * sum;
      double acc = 0.0;
      token = static_cast<int32_t>(best);
      for (size_t t = 0; t < vocab; ++t) {
        acc += row_[t];
        if (r < acc) {
          token = static_cast<int32_t>(t);
          break;
        }
      }
    }
    draft->push_back(token);
    if (i + 1 < max_tokens) {
      POCKET_RETURN_IF_ERROR(session_->Append(std::span<const int32_t>(&token, 1)));
    }
  }
  return Status::Ok();
}

}  // namespace pocket
