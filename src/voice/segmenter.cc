#include "voice/segmenter.h"

#include <algorithm>
#include <iterator>

namespace pocket::voice {
namespace {

constexpr size_t kNone = std::string::npos;

// The code point at text[i] (its length in *len); U+FFFD for a byte that does not start a valid
// sequence (length 1).
char32_t Decode(std::string_view text, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(text[i]);
  const size_t n = Utf8Length(b);
  if (n == 1 || i + n > text.size()) {
    *len = 1;
    return b < 0x80 ? b : 0xFFFD;
  }
  char32_t c = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto cont = static_cast<unsigned char>(text[i + k]);
    if ((cont & 0xC0) != 0x80) {
      *len = 1;
      return 0xFFFD;
    }
    c = (c << 6) | (cont & 0x3F);
  }
  *len = n;
  return c;
}

bool IsSpace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x3000;
}
bool IsLower(char32_t c) {
  return c >= 'a' && c <= 'z';
}
// Ends a sentence by itself, no space needed (Chinese and Japanese full-width punctuation).
bool IsWideSentenceEnd(char32_t c) {
  return c == 0x3002 || c == 0xFF01 || c == 0xFF1F || c == 0xFF1B || c == 0xFF0E;
}
bool IsWideComma(char32_t c) {
  return c == 0xFF0C || c == 0x3001 || c == 0xFF1A;
}
// Closing quotes and brackets that stay with the sentence they end.
bool IsCloser(char32_t c) {
  return c == '"' || c == '\'' || c == ')' || c == ']' || c == 0x201D || c == 0x2019 ||
         c == 0x300D || c == 0x300F || c == 0xFF09;
}
bool IsWide(char32_t c) {
  return c >= 0x2E80 && c <= 0xFFEF;
}

// Words that end with a period without ending the sentence (compared without the period, and
// case-sensitively: "No." but not "no.").
constexpr std::string_view kAbbreviations[] = {"Mr",  "Mrs",    "Ms",  "Dr",   "Prof", "St",
                                               "Jr",  "Sr",     "Mt",  "vs",   "No",   "Fig",
                                               "Vol", "approx", "Gen", "Capt", "Lt",   "Rev"};

}  // namespace

size_t Utf8Length(unsigned char lead) {
  if (lead < 0xC2) return 1;  // ASCII, a continuation byte or an overlong lead
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 1;
}

size_t Segmenter::FindCut(bool final) const {
  const std::string_view t = text_;
  const bool first = emitted_ == 0;
  const int32_t comma_chars = first ? options_.first_min_chars : options_.comma_chars;
  const int32_t max_chars =
      first ? std::min(options_.first_max_chars, options_.max_chars) : options_.max_chars;
  int32_t chars = 0;  // code points since start_
  int32_t words = 0;
  bool in_word = false;
  size_t last_space = kNone;  // the last space after some text
  size_t word_start = start_;
  size_t len = 0;
  for (size_t i = start_; i < t.size(); i += len) {
    const char32_t c = Decode(t, i, &len);
    if (chars > 0 || !IsSpace(c)) ++chars;  // leading spaces are not spoken
    if (IsSpace(c)) {
      if (in_word) {
        ++words;
        last_space = i;
        if (first && words >= options_.first_max_words) return i;
      }
      in_word = false;
      word_start = i + len;
    } else {
      in_word = true;
    }
    if (c == '.' || c == '!' || c == '?' || c == 0x2026) {
      // The run of enders and closers that follows.
      size_t k = i + len;
      bool dots = c == '.' || c == 0x2026;
      size_t n = 0;
      while (k < t.size()) {
        const char32_t d = Decode(t, k, &n);
        if (d != '.' && d != '!' && d != '?' && d != 0x2026 && !IsCloser(d)) break;
        if (d == 0x2026 || (d == '.' && c == '.')) dots = true;
        k += n;
      }
      if (k >= t.size()) {
        if (final) return k;
        return kNone;  // the next character decides
      }
      const char32_t next = Decode(t, k, &n);
      if (IsWide(next) && !IsSpace(next)) return k;
      if (!IsSpace(next)) {
        // 3.14, U.S, example.com: inside a word.
        if (chars >= max_chars && last_space != kNone) return last_space;
        continue;
      }
      if (dots) {
        // A period: not an end before a lowercase word (an ellipsis inside a sentence, "e.g.
        // this"), nor after an abbreviation or an initial.
        size_t w = k;
        while (w < t.size() && IsSpace(Decode(t, w, &n))) w += n;
        if (w >= t.size()) {
          if (final) return k;
          return kNone;
        }
        if (IsLower(Decode(t, w, &n))) continue;
        if (c == '.' && k == i + len) {
          const std::string_view word = t.substr(word_start, i - word_start);
          const bool initial = word.size() == 1 && word[0] >= 'A' && word[0] <= 'Z';
          const bool dotted = word.find('.') != std::string_view::npos;  // e.g, U.S
          if (initial || dotted ||
              std::find(std::begin(kAbbreviations), std::end(kAbbreviations), word) !=
                  std::end(kAbbreviations)) {
            continue;
          }
        }
      }
      return k;
    }
    if (IsWideSentenceEnd(c)) {
      size_t k = i + len;
      size_t n = 0;
      while (k < t.size() && IsCloser(Decode(t, k, &n))) k += n;
      if (k >= t.size() && !final) return kNone;  // a closing quote may follow
      return k;
    }
    if (chars >= comma_chars) {
      if (IsWideComma(c)) return i + len;
      if (c == ',' || c == ';' || c == ':') {
        const size_t k = i + len;
        if (k >= t.size()) {
          if (final) return k;
          return kNone;
        }
        size_t n = 0;
        const char32_t next = Decode(t, k, &n);
        if (IsSpace(next) || IsWide(next)) return k;  // not 1,000 or 10:30
      }
    }
    if (chars >= max_chars) {
      // Too long without a place to cut: at the last space, or (text without spaces) here,
      // between two characters.
      return last_space != kNone ? last_space : i + len;
    }
  }
  return kNone;
}

void Segmenter::Emit(size_t cut, std::vector<Segment>& out) {
  const std::string_view t = std::string_view(text_).substr(start_, cut - start_);
  size_t b = 0;
  size_t e = t.size();
  while (b < e && (t[b] == ' ' || t[b] == '\n' || t[b] == '\t' || t[b] == '\r')) ++b;
  while (e > b && (t[e - 1] == ' ' || t[e - 1] == '\n' || t[e - 1] == '\t' || t[e - 1] == '\r')) {
    --e;
  }
  if (e > b) {
    out.push_back(Segment{std::string(t.substr(b, e - b)), start_, cut});
    ++emitted_;
  }
  start_ = cut;
}

void Segmenter::Push(std::string_view text, std::vector<Segment>& out) {
  text_.append(text);
  for (size_t cut = FindCut(false); cut != kNone; cut = FindCut(false)) Emit(cut, out);
}

void Segmenter::Finish(std::vector<Segment>& out) {
  for (size_t cut = FindCut(true); cut != kNone && cut < text_.size(); cut = FindCut(true)) {
    Emit(cut, out);
  }
  if (start_ < text_.size()) Emit(text_.size(), out);
}

void Segmenter::Reset() {
  text_.clear();
  start_ = 0;
  emitted_ = 0;
}

}  // namespace pocket::voice
