// Corpus-driven vocabulary pruning for byte-level BPE (how MNN-Pocket-0.3B cut Qwen3's 151,669
// tokens to 65,536), and writing the result as a Hugging Face tokenizer.json.
//
// The pruned vocabulary keeps every added/special token, the 256 byte tokens and a merge-closed
// set of regular tokens: a kept token is added together with the parts of every merge that
// builds it, recursively down to bytes, and the kept merges are those whose parts and result are
// all kept, in their original rank order. On any text whose full-vocabulary tokens are all kept,
// the pruned tokenizer applies the same merges in the same order, so it gives the same tokens
// (with new ids); on any other text it still encodes every byte (losslessly), with more tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

struct PrunedVocab {
  TokenizerSpec spec;           // dense ids 0 .. size - 1, in the original id order
  std::vector<int32_t> old_id;  // new id -> id in the full vocabulary
  std::vector<int32_t> new_id;  // id in the full vocabulary -> new id, or -1 when dropped
};

// `counts[id]`: how often token `id` of `full` was used on the training corpus (its size is the
// full vocabulary's). Regular tokens are taken by count, most used first, ties (and unused tokens)
// by id, which for Qwen's vocabularies is merge rank; each with its merge closure, until
// `new_size` tokens are kept. Errors when the tokens that must stay do not fit.
StatusOr<PrunedVocab> PruneVocab(const TokenizerSpec& full, std::span<const int64_t> counts,
                                 int32_t new_size);

// A Hugging Face tokenizer.json for a byte-level BPE spec with the Qwen2 pre-tokenizer. When
// `base_json` (the tokenizer.json the full vocabulary came from) is given, every field of it is
// kept except model.vocab, model.merges and added_tokens, which are rewritten (ids in a
// TemplateProcessing post-processor follow their tokens).
StatusOr<std::string> HfTokenizerJson(const TokenizerSpec& spec, std::string_view base_json = {});

}  // namespace pocket
