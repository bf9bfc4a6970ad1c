// The model side of vocabulary pruning: a GGUF file rewritten for a pruned tokenizer (embedding
// and output rows in the new id order, tokenizer metadata replaced, special-token ids remapped).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_prune.h"

namespace pocket {

// `full` is the tokenizer the pruning started from: the model's vocabulary must be the same
// (token for token), else the error names the first id where they differ. Every other tensor and
// metadata value is copied unchanged. The output is written to a temporary file and renamed;
// it is never the input, nor one of `other_inputs` (the tokenizer, corpora: whatever else the
// tool read).
Status PruneGgufVocab(const std::string& input, const std::string& output,
                      const TokenizerSpec& full, const PrunedVocab& pruned,
                      const std::vector<std::string>& other_inputs = {});

}  // namespace pocket
