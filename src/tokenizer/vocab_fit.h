// Vocabulary pruning for synthetic and distilled models: a model whose embedding table has fewer
// rows than the original tokenizer (MNN-Pocket-0.3B uses Qwen3's byte-level BPE cut to 65,536).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

// Cuts a byte-level BPE vocabulary to `new_size` tokens: keeps the first (new_size - n_added)
// regular tokens by id (Qwen's ids are in merge-rank order), keeps the merges whose parts and
// result are all kept, and moves the added tokens (kControl, kUserDefined) to the end, in their
// original order (ids new_size - n_added .. new_size - 1). bos/eos/pad/unk are remapped.
// Errors when the cut is not closed under merges (a kept token that no kept merge builds, or a
// missing single-byte token), since such a tokenizer could not produce some of its own tokens.
StatusOr<TokenizerSpec> TruncateVocab(const TokenizerSpec& full, int32_t new_size);

}  // namespace pocket
