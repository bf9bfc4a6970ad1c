// The llama2.c tokenizer (tokenizer.bin written by llama2.c's tokenizer.py from a SentencePiece
// model): tokens are raw byte strings with merge scores; ids 3..258 are the byte-fallback pieces
// <0x00>..<0xFF>. Encoding follows run.c exactly: a dummy-prefix space, one token per code point
// (or its bytes as byte+3), then repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring token (leftmost on ties).
#pragma once

#include <memory>

#include "tokenizer/hash_tables.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

class Llama2cTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::shared_ptr<const Tokenizer>> Create(TokenizerSpec spec);
  // Parses tokenizer.bin into a spec (the vocabulary size is not stored in the file).
  static StatusOr<TokenizerSpec> ReadSpec(std::string_view file_bytes, int32_t vocab_size,
                                          std::string_view file_name);

  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options = {}) const override;
  // <0xXX> pieces stand for one raw byte; BOS and EOS for nothing (SentencePiece drops them).
  std::string_view TokenBytes(int32_t id) const override;
  std::string_view DecodePiece(int32_t prev_id, int32_t id) const override;
  int32_t FindToken(std::string_view stored) const override { return pieces_.Find(stored); }

 private:
  explicit Llama2cTokenizer(TokenizerSpec spec) : Tokenizer(std::move(spec)) {}
  Status Build();

  StringTable pieces_;  // id -> stored bytes, indexed
  StringTable bytes_;   // id -> decoded bytes
  int32_t space_id_ = -1;
};

}  // namespace pocket
