// Drafters for speculative decoding: cheap guesses of the next few tokens, which the target model
// then verifies in one forward pass (runtime/speculative.h). A drafter never changes the output:
// verification keeps a drafted token only where the target's own sampler chain picks it, so a bad
// drafter costs speed, never correctness.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace pocket {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens tokens that may follow `context` (the prompt and the output so far), written
  // to `draft` (cleared first; empty: no guess). Deterministic: the same context, the same draft.
  virtual Status Draft(std::span<const int32_t> context, int32_t max_tokens,
                       std::vector<int32_t>* draft) = 0;
};

// Prompt lookup (n-gram matching): finds the most recent earlier occurrence of the context's last
// n tokens (n from max_ngram down to min_ngram) and proposes the tokens that followed it. Pays off
// where the output copies from the input (extraction, editing, repetition). Allocates nothing.
struct PromptLookupOptions {
  int32_t min_ngram = 2;
  int32_t max_ngram = 4;
  Status Validate() const;
};

class PromptLookupDrafter final : public Drafter {
 public:
  explicit PromptLookupDrafter(const PromptLookupOptions& options = {}) : options_(options) {}
  Status Draft(std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* draft) override;

 private:
  PromptLookupOptions options_;
};

}  // namespace pocket
