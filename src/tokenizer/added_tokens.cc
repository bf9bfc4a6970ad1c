#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace pocket {

void AddedTokenMatcher::Add(std::string_view text, int32_t id, bool special) {
  if (text.empty()) return;  // HF ignores empty added tokens too
  tokens_.push_back({std::string(text), id, special});
}

void AddedTokenMatcher::Finalize() {
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const Token& a, const Token& b) {
    const auto fa = static_cast<uint8_t>(a.text[0]), fb = static_cast<uint8_t>(b.text[0]);
    return fa != fb ? fa < fb : a.text.size() > b.text.size();
  });
  by_first_byte_.fill({0, 0});
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    auto& range = by_first_byte_[static_cast<uint8_t>(tokens_[i].text[0])];
    if (range.first == range.second) range.first = i;
    range.second = i + 1;
  }
}

AddedTokenMatcher::Match AddedTokenMatcher::FindNext(std::string_view text, size_t from,
                                                     bool include_special) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto range = by_first_byte_[static_cast<uint8_t>(text[pos])];
    for (uint32_t i = range.first; i < range.second; ++i) {
      const Token& token = tokens_[i];
      if (token.special && !include_special) continue;
      if (text.compare(pos, token.text.size(), token.text) == 0) {
        return {pos, token.text.size(), token.id};
      }
    }
  }
  return {text.size(), 0, -1};
}

}  // namespace pocket
