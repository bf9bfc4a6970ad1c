#include "tokenizer/qwen2_pretokenizer.h"

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace pocket {

void Qwen2PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces) {
  chars_.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    const auto offset = static_cast<uint32_t>(pos);
    const char32_t cp = utf8::DecodeAt(text, &pos);
    Kind kind;
    char folded = 0;
    if (cp == ' ') {
      kind = kSpace;
    } else if (cp == '\r' || cp == '\n') {
      kind = kNewline;
    } else {
      switch (unicode::ClassifyForRegex(cp)) {
        case unicode::RegexClass::kLetter:
          kind = kLetter;
          if (cp < 0x80) folded = static_cast<char>(cp | 0x20);
          if (cp == 0x017F) folded = 's';  // Oniguruma's case folding: U+017F -> 's'
          break;
        case unicode::RegexClass::kNumber:
          kind = kNumber;
          break;
        case unicode::RegexClass::kWhiteSpace:
          kind = kOtherSpace;
          break;
        default:
          kind = kOther;
          if (cp == '\'') folded = '\'';
          break;
      }
    }
    chars_.push_back({offset, kind, folded});
  }
  const size_t n = chars_.size();
  size_t i = 0;
  while (i < n) {
    const size_t end = MatchAt(i);
    const size_t begin_byte = chars_[i].offset;
    const size_t end_byte = end < n ? chars_[end].offset : text.size();
    pieces->push_back(text.substr(begin_byte, end_byte - begin_byte));
    i = end;
  }
}

size_t Qwen2PreTokenizer::MatchAt(size_t i) const {
  const size_t n = chars_.size();
  const Kind kind = chars_[i].kind;
  auto is_space = [](Kind k) { return k == kSpace || k == kNewline || k == kOtherSpace; };

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (chars_[i].folded == '\'' && i + 1 < n) {
    const char a = chars_[i + 1].folded;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = chars_[i + 2].folded;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        return i + 3;
      }
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t letters_from = n;  // where \p{L}+ would start
  if (kind == kLetter) {
    letters_from = i;
  } else if (kind != kNewline && kind != kNumber && i + 1 < n && chars_[i + 1].kind == kLetter) {
    letters_from = i + 1;
  }
  if (letters_from < n) {
    size_t j = letters_from + 1;
    while (j < n && chars_[j].kind == kLetter) ++j;
    return j;
  }
  // \p{N}
  if (kind == kNumber) return i + 1;
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t k = kind == kSpace ? i + 1 : i;
  if (k < n && chars_[k].kind == kOther) {
    while (k < n && chars_[k].kind == kOther) ++k;
    while (k < n && chars_[k].kind == kNewline) ++k;
    return k;
  }
  // Here chars_[i] is white space. The maximal white-space run is [i, run_end).
  size_t run_end = i + 1;
  while (run_end < n && is_space(chars_[run_end].kind)) ++run_end;
  // \s*[\r\n]+ : \s* backtracks to the last newline of the run; [\r\n]+ then takes just it.
  for (size_t j = run_end; j > i; --j) {
    if (chars_[j - 1].kind == kNewline) return j;
  }
  // \s+(?!\S) : the whole run at the end of the text, else all but its last character.
  if (run_end == n) return n;
  if (run_end - 1 > i) return run_end - 1;
  // \s+
  return run_end;
}

}  // namespace pocket
