// The Qwen2 / Qwen3 pre-tokenizer: a hand-written matcher for the Split regex of their
// tokenizer.json, with "Isolated" behaviour (every match is a piece; the regex matches at every
// position, so the pieces cover the text):
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
//
// The semantics are Oniguruma's (leftmost alternative that matches, greedy with backtracking):
// \s is Unicode White_Space, (?i) folds U+017F LATIN SMALL LETTER LONG S to 's', and \p{L}, \p{N}
// follow Unicode 16.0 (see unicode.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace pocket {

// The Split regex of Qwen2/Qwen3 tokenizer.json files, which this pre-tokenizer implements.
inline constexpr std::string_view kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class Qwen2PreTokenizer {
 public:
  // Appends the pieces of `text` (valid UTF-8) to `pieces`; they are views into `text`. Reuses
  // internal buffers, so one instance should serve many calls (not concurrently).
  void Split(std::string_view text, std::vector<std::string_view>* pieces);

 private:
  enum Kind : uint8_t { kLetter, kNumber, kSpace, kNewline, kOtherSpace, kOther };
  struct Char {
    uint32_t offset;  // byte offset in the text
    Kind kind;
    char folded;  // lower-case ASCII letter (U+017F -> 's') for the contraction alternative, or 0
  };
  // End (character index) of the match starting at character `i`.
  size_t MatchAt(size_t i) const;

  std::vector<Char> chars_;
};

}  // namespace pocket
