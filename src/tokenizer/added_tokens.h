// Added tokens (special ones such as <|im_end|> and plain ones such as <think>) are found in the
// raw text before anything else, as Hugging Face tokenizers does: at the leftmost position where
// any of them occurs, the longest one wins; the text between matches goes through normalization,
// pre-tokenization and BPE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pocket {

class AddedTokenMatcher {
 public:
  // `special` tokens are skipped when matching with include_special = false.
  void Add(std::string_view text, int32_t id, bool special);
  // Builds the lookup structure; call after the last Add.
  void Finalize();
  bool empty() const { return tokens_.empty(); }

  struct Match {
    size_t begin;
    size_t length;
    int32_t id;
  };
  // The leftmost-longest added token in text[from, ...), or length 0 when there is none.
  Match FindNext(std::string_view text, size_t from, bool include_special) const;

 private:
  struct Token {
    std::string text;
    int32_t id;
    bool special;
  };
  std::vector<Token> tokens_;  // sorted by first byte, then longest first
  // For each first byte, the range of tokens_ that starts with it (begin, end); empty if none.
  std::array<std::pair<uint32_t, uint32_t>, 256> by_first_byte_{};
};

}  // namespace pocket
