// Byte-level BPE as Hugging Face tokenizers runs it for Qwen2/Qwen3: added tokens matched in the
// raw text, NFC on the text between them, the Qwen2 pre-tokenizer, the GPT-2 byte mapping, then
// merges by rank. Immutable after Create; Encode keeps its scratch state per call, so one instance
// serves any number of threads.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_tables.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::shared_ptr<const Tokenizer>> Create(TokenizerSpec spec);
  // A tokenizer over a table image that is used in place (a mapped .pocket section): `meta` gives
  // the settings (special ids, pre-tokenizer, normalization; no tokens or merges), `words` the
  // image, `keep_alive` whatever keeps `words` valid. `name` is used in messages.
  static StatusOr<std::shared_ptr<const Tokenizer>> FromTables(
      TokenizerSpec meta, std::span<const uint32_t> words, std::shared_ptr<const void> keep_alive,
      const std::string& name);

  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options = {}) const override;
  std::string_view TokenBytes(int32_t id) const override;
  int32_t FindToken(std::string_view stored) const override;
  TokenizerSpec FullSpec() const override;
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < n_tokens_ && tables_.type(id) == TokenType::kControl;
  }
  // The table image (what a .pocket tokenizer section stores).
  std::span<const uint32_t> tables_image() const { return image_; }

 private:
  struct EncodeState;
  explicit ByteLevelBpeTokenizer(TokenizerSpec spec) : Tokenizer(std::move(spec)) {}
  // Takes the checked tables: the vocabulary size, token types and added tokens come from them.
  Status Init(const BpeTables& tables);
  // Encodes text that holds no added tokens.
  void EncodeSegment(std::string_view text, EncodeState* state, std::vector<int32_t>* ids) const;
  // Encodes one pre-tokenizer piece.
  void EncodeWord(std::string_view word, EncodeState* state, std::vector<int32_t>* ids) const;

  std::vector<uint32_t> owned_image_;       // the image, when built in memory
  std::shared_ptr<const void> keep_alive_;  // the image's storage, when used in place
  std::span<const uint32_t> image_;
  BpeTables tables_;
  AddedTokenMatcher added_;
  std::unordered_map<std::string, int32_t> added_ids_;  // added token text -> id
};

}  // namespace pocket
