#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>

#include "base/rng.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

// Reference: split at HF-opaque characters, utf8proc NFC on the rest, no fast path.
std::string ReferenceNfc(std::string_view text) {
  std::string out;
  auto flush = [&](std::string_view run) {
    if (run.empty()) return;
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                     static_cast<utf8proc_ssize_t>(run.size()), &result,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n >= 0) out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
  };
  size_t run_start = 0, pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    if (unicode::IsNfcOpaqueForHf(utf8::DecodeAt(text, &pos))) {
      flush(text.substr(run_start, start - run_start));
      out.append(text.substr(start, pos - start));
      run_start = pos;
    }
  }
  flush(text.substr(run_start));
  return out;
}

TEST(NfcTest, KnownCases) {
  EXPECT_EQ(NormalizeNfc("cafe\u0301"), "caf\u00E9");
  EXPECT_EQ(NormalizeNfc("A\u030A"), "\u00C5");
  EXPECT_EQ(NormalizeNfc("\u212B"), "\u00C5");              // Angstrom sign: a singleton
  EXPECT_EQ(NormalizeNfc("\u1100\u1161\u11A8"), "\uAC01");  // Hangul jamo compose
  EXPECT_EQ(NormalizeNfc("\u0958"), "\u0915\u093C");  // composition exclusion stays decomposed
  EXPECT_EQ(NormalizeNfc("\u05D0\u0591\u05B0"), "\u05D0\u05B0\u0591");  // reordered by ccc
  EXPECT_EQ(NormalizeNfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(NormalizeNfc("中文，テキスト😀"), "中文，テキスト😀");
  EXPECT_EQ(NormalizeNfc(""), "");
}

TEST(NfcTest, CharactersNewerThanUnicode9AreLeftAlone) {
  // Dives Akuru U+11935 U+11930 compose to U+11938 in Unicode 13; HF (Unicode 9.0) keeps them.
  EXPECT_EQ(NormalizeNfc("\U00011935\U00011930"), "\U00011935\U00011930");
  // U+1DF6 (ccc 232, Unicode 10) is not reordered before U+0301 (ccc 230) ...
  EXPECT_EQ(NormalizeNfc("a\u1DF6\u0301"), "a\u1DF6\u0301");
  // ... and blocks nothing it does not block in HF: a + U+0301 after it does not compose.
  EXPECT_EQ(NormalizeNfc("a\u0301\u1DF6"), "\u00E1\u1DF6");
}

TEST(NfcTest, FastPathMatchesReference) {
  const std::vector<char32_t> pool = {
      'a',     'e',    'A',    ' ',    '.',    0x00E9,  0x0301,  0x0300,  0x0308, 0x0327, 0x0345,
      0x05B0,  0x0591, 0x093C, 0x0915, 0x0958, 0x1100,  0x1161,  0x11A8,  0xAC00, 0x212B, 0x2126,
      0x4E2D,  0x3099, 0x304B, 0x1DF6, 0x07FD, 0x11935, 0x11930, 0x0B47,  0x0B3E, 0x0DD9, 0x0DCF,
      0x1F600, 0x2000, 0x1E0A, 0x0323, 0x0307, 0x0F71,  0x0F72,  0x1E4EC, 0xFF21, 0x3000, 0x302A};
  Rng rng(1234);
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const int length = 1 + static_cast<int>(rng.NextBelow(12));
    for (int j = 0; j < length; ++j) {
      char32_t cp = pool[rng.NextBelow(pool.size())];
      if (rng.NextBelow(8) == 0) {
        do {
          cp = static_cast<char32_t>(rng.NextBelow(0x110000));
        } while (cp >= 0xD800 && cp <= 0xDFFF);
      }
      utf8::Append(cp, &text);
    }
    ASSERT_EQ(NormalizeNfc(text), ReferenceNfc(text)) << i;
  }
}

}  // namespace
}  // namespace pocket
