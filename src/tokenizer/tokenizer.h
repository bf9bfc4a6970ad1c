// Tokenizers: byte-level BPE (Hugging Face tokenizer.json, GGUF tokenizer.ggml.model = gpt2 with
// the qwen2 pre-tokenizer) and the llama2.c tokenizer (tokenizer.bin: scored merges, byte
// fallback). A Tokenizer is immutable after construction and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace pocket {

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens (<|im_end|>, <s>)
  kUserDefined = 4,  // added tokens that are not special (<think>)
  kUnused = 5,
  kByte = 6,  // llama2.c / SentencePiece <0xXX> pieces
};

enum class TokenizerKind {
  kByteLevelBpe,  // GPT-2 style: bytes mapped to printable code points, merges by rank
  kLlama2c,       // llama2.c tokenizer.bin: code points, merges by score, <0xXX> byte fallback
};

// Plain data from which a Tokenizer is built; each file format has a loader that fills it.
struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  // id -> token as stored: for byte-level BPE the GPT-2 byte-to-unicode form ("Ġthe"); for
  // added/special tokens their literal text ("<|im_end|>"); for llama2.c the raw bytes.
  std::vector<std::string> tokens;
  std::vector<TokenType> types;  // same size as tokens, or empty (then: all kNormal)
  std::vector<float> scores;     // llama2.c merge scores (same size as tokens), else empty
  // Byte-level BPE merges in rank order, each the two parts in stored form.
  std::vector<std::pair<std::string, std::string>> merges;
  // The same by token id (the .pocket form): used when `merges` is empty.
  std::vector<std::pair<int32_t, int32_t>> merge_ids;
  // Pre-tokenizer: "qwen2" (the Qwen2/Qwen3 split regex). Others are a clear error.
  std::string pre_tokenizer = "qwen2";
  bool normalize_nfc = true;
  int32_t bos_id = -1;
  int32_t eos_id = -1;  // the end of a turn / of generation
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;       // prepend BOS when encoding a prompt
  std::string chat_template;  // Jinja source as shipped with the model (may be empty)
};

struct EncodeOptions {
  // Recognise special (kControl) token strings such as "<|im_end|>" in the text (HF default).
  // When false they are encoded as plain text. Added tokens that are not special (kUserDefined,
  // such as "<think>") are always recognised, as HF (split_special_tokens) and llama.cpp
  // (parse_special = false) do.
  bool parse_special = true;
  bool add_bos = false;  // prepend the BOS token (if the tokenizer has one)
};

class Tokenizer {
 public:
  static StatusOr<std::shared_ptr<const Tokenizer>> FromSpec(TokenizerSpec spec);
  // tokenizer.json; reads tokenizer_config.json beside it when present (chat template, eos).
  static StatusOr<std::shared_ptr<const Tokenizer>> FromHfJsonFile(const std::string& path);
  // tokenizer.json text already in memory (no tokenizer_config.json); `name` is used in messages.
  static StatusOr<std::shared_ptr<const Tokenizer>> FromHfJson(std::string_view json,
                                                               const std::string& name);
  // llama2.c tokenizer.bin; the vocabulary size is not stored in the file.
  static StatusOr<std::shared_ptr<const Tokenizer>> FromLlama2cFile(const std::string& path,
                                                                    int32_t vocab_size);

  virtual ~Tokenizer();

  // Invalid UTF-8 in `text` is an error naming the byte offset.
  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                const EncodeOptions& options = {}) const = 0;
  // The bytes a token stands for (after undoing the byte-level mapping); for added tokens their
  // text; for llama2.c's BOS and EOS nothing (SentencePiece drops them). Out-of-range ids give an
  // empty view.
  virtual std::string_view TokenBytes(int32_t id) const = 0;
  // The bytes `id` contributes when it follows `prev_id` (-1 at the start): TokenBytes(id), except
  // that the llama2.c tokenizer drops the leading space of the piece right after BOS.
  virtual std::string_view DecodePiece([[maybe_unused]] int32_t prev_id, int32_t id) const {
    return TokenBytes(id);
  }
  // Concatenated bytes (may end inside a UTF-8 character; see StreamDecoder). Out-of-range ids are
  // an error naming the position.
  StatusOr<std::string> Decode(std::span<const int32_t> ids) const;

  // The spec the tokenizer was built from. Byte-level BPE tokenizers keep their vocabulary in
  // compact tables (possibly mapped from a package) and leave spec().tokens, types and merges empty
  // (the strings cost megabytes an app never needs); FullSpec() rebuilds the complete spec, tokens
  // and merges included, for tools that write one.
  const TokenizerSpec& spec() const { return spec_; }
  virtual TokenizerSpec FullSpec() const { return spec_; }
  int32_t vocab_size() const { return n_tokens_; }
  virtual bool IsSpecial(int32_t id) const;  // kControl tokens
  // Token id of an exact token string (stored form), or -1.
  virtual int32_t FindToken(std::string_view stored) const = 0;

 protected:
  explicit Tokenizer(TokenizerSpec spec)
      : spec_(std::move(spec)), n_tokens_(static_cast<int32_t>(spec_.tokens.size())) {}
  TokenizerSpec spec_;
  int32_t n_tokens_ = 0;
};

// Incremental detokenizer for streaming: returns only complete UTF-8 characters, holding back the
// bytes of an unfinished one. A sequence that can never become valid is emitted as U+FFFD. For
// tokens that decode to valid UTF-8, the concatenated Push outputs plus Flush equal Decode.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // Text that became complete with this token (possibly empty). Out-of-range ids add nothing.
  std::string Push(int32_t id);
  // The same, appended to `out` (allocates nothing once `out` and the decoder have grown).
  void PushTo(int32_t id, std::string* out);
  // Whatever is held back, with incomplete characters replaced by U+FFFD. Resets.
  std::string Flush();
  void Reset() {
    pending_.clear();
    prev_id_ = -1;
  }
  // The token the text continues (the context's last, before the first token pushed): a
  // llama2.c generation right after BOS starts without the space SentencePiece put before its
  // first word, as llama2.c and llama.cpp print it.
  void Follow(int32_t prev_id) { prev_id_ = prev_id; }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;   // bytes of an unfinished character (at most 3)
  int32_t prev_id_ = -1;  // llama2.c: the piece right after BOS loses its leading space
};

// Unicode helpers shared with other layers (constraints, tests).
// Offset of the first invalid UTF-8 byte, or -1 when `text` is valid (no surrogates, no overlongs).
// A sequence cut short by the end of the text is invalid at its first byte.
int64_t FindInvalidUtf8(std::string_view text);
// NFC normalization as Hugging Face tokenizers computes it (utf8proc, except that characters
// assigned after Unicode 9.0 are never reordered or composed; see unicode.h). `text` must be valid
// UTF-8.
std::string NormalizeNfc(std::string_view text);

}  // namespace pocket
