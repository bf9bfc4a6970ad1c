// The one rule for turning candidate continuations into tokens, shared by `pocket score`,
// `pocket run --choice`, the C API's pocket_score and choice-constrained generation: a candidate's
// tokens are those of Encode(prompt + candidate) after the prompt's own tokens, Encode(prompt).
// So " positive" after "Sentiment:" is scored as the model would see it in running text, whatever
// the vocabulary does with leading spaces (SentencePiece's dummy prefix, byte-level BPE's "Ġ").
// When the joint encoding does not start with the prompt's tokens (the boundary merges, as
// "Answer: " + "yes" into " yes"), the candidate is encoded on its own (no BOS) instead.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

struct CandidateTokens {
  std::vector<int32_t> prompt;                   // Encode(prompt, options)
  std::vector<std::vector<int32_t>> candidates;  // one per candidate, never empty
  // Per candidate: true when its tokens came from the joint encoding, false when the boundary
  // merged and it was encoded alone.
  std::vector<bool> joint;
};

// `options` apply to the prompt and the joint encodings (add_bos to their start only). An empty
// candidate, or one that encodes to no tokens, is an error naming it.
StatusOr<CandidateTokens> TokenizeCandidates(const Tokenizer& tokenizer, std::string_view prompt,
                                             std::span<const std::string> candidates,
                                             const EncodeOptions& options);

// The same for a prompt given as token ids (no text to join with): each candidate alone, no BOS.
StatusOr<std::vector<std::vector<int32_t>>> TokenizeCandidatesAlone(
    const Tokenizer& tokenizer, std::span<const std::string> candidates,
    const EncodeOptions& options);

}  // namespace pocket
