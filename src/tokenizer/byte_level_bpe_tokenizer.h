// Byte-level BPE as Hugging Face tokenizers runs it for Qwen2/Qwen3: added tokens matched in the
// raw text, NFC on the text between them, the Qwen2 pre-tokenizer, the GPT-2 byte mapping, then
// merges by rank. Immutable after Create; Encode keeps its scratch state per call, so one instance
// serves any number of threads.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/added_tokens.h"
#include "tokenizer/hash_tables.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::shared_ptr<const Tokenizer>> Create(TokenizerSpec spec);

  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options = {}) const override;
  std::string_view TokenBytes(int32_t id) const override;
  int32_t FindToken(std::string_view stored) const override;
  TokenizerSpec FullSpec() const override;

 private:
  struct EncodeState;
  explicit ByteLevelBpeTokenizer(TokenizerSpec spec) : Tokenizer(std::move(spec)) {}
  Status Build();
  Status BuildMerges();
  Status BuildMergesFromIds();
  bool IsRegular(int32_t id) const;  // indexed by bytes: not added, not unused
  Status MergeError(size_t rank, std::string_view problem) const;
  // Encodes text that holds no added tokens.
  void EncodeSegment(std::string_view text, EncodeState* state, std::vector<int32_t>* ids) const;
  // Encodes one pre-tokenizer piece.
  void EncodeWord(std::string_view word, EncodeState* state, std::vector<int32_t>* ids) const;

  StringTable bytes_;  // id -> bytes; indexed over the regular tokens
  PairTable merges_;   // (left, right) -> (rank, merged id)
  // The same for pairs of ids below kDensePairIds (the byte tokens in GPT-2-style vocabularies,
  // where every word starts), as a dense table that stays in cache. {-1, -1}: no merge.
  static constexpr int32_t kDensePairIds = 256;
  std::vector<PairTable::Value> dense_pairs_;
  std::array<int32_t, 256> byte_ids_{};                 // byte -> the token of that single byte
  std::vector<std::pair<int32_t, int32_t>> merge_ids_;  // the merges' parts by id, in rank order
  AddedTokenMatcher added_;
  std::unordered_map<std::string, int32_t> added_ids_;  // added token text -> id
  // Tokens whose stored form is not the byte-level form of their bytes (unused tokens outside the
  // byte-level alphabet): FullSpec() restores them from here.
  std::vector<std::pair<int32_t, std::string>> irregular_tokens_;
};

}  // namespace pocket
