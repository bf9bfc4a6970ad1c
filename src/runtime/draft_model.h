// The draft-model drafter: a smaller model with the target's vocabulary proposes the next tokens
// one by one on its own session (its own KV cache, kept across drafts: after a verification only
// the rows past the first difference are recomputed). Greedy (temperature 0) it drafts the argmax
// and is verified by equality; sampled, it draws each token from q = softmax(logits / T) and the
// verifier keeps it with probability min(1, p/q) (Drafter::sampled). Drafting stops early when
// the draft model's top probability falls below p_min (it is unsure: the rest would be rejected).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/rng.h"
#include "base/status.h"
#include "generate/drafter.h"
#include "model/model.h"
#include "runtime/session.h"

namespace pocket {

// The draft model must speak the target's vocabulary: the same size and, token by token, the same
// strings and the same special tokens (else an error naming the first difference). Both need a
// tokenizer, or neither (synthetic models read and write token ids: sizes only).
Status CheckSameVocabulary(const Model& target, const Model& draft);

struct DraftModelOptions {
  float p_min = 0.0f;        // stop drafting below this top probability (0: never)
  float temperature = 0.0f;  // 0: argmax drafts; > 0: sampled from softmax(logits / T)
  uint64_t seed = 0;         // the draft's own random stream (sampled drafts)
  SessionOptions session;    // the draft model's session (context, threads, pool, KV type)
  Status Validate() const;
};

class DraftModelDrafter final : public Drafter {
 public:
  static StatusOr<std::unique_ptr<DraftModelDrafter>> Create(std::shared_ptr<const Model> draft,
                                                             const Model& target,
                                                             const DraftModelOptions& options);

  Status Draft(std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* draft) override;
  bool sampled() const override { return options_.temperature > 0.0f; }
  std::span<const float> draft_probs() const override { return probs_; }

  const Session& session() const { return *session_; }

 private:
  DraftModelDrafter(std::unique_ptr<Session> session, const DraftModelOptions& options);

  std::unique_ptr<Session> session_;
  DraftModelOptions options_;
  Rng rng_;
  std::vector<float> probs_;  // [drafted, vocab]: q of each drafted token (sampled drafts)
  std::vector<float> row_;    // softmax work row
};

}  // namespace pocket
