#include "tokenizer/qwen2_pretokenizer.h"

#include <gtest/gtest.h>

#include <string>

#include "base/str.h"

namespace pocket {
namespace {

std::vector<std::string> Split(std::string_view text) {
  Qwen2PreTokenizer pre_tokenizer;
  std::vector<std::string_view> pieces;
  pre_tokenizer.Split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

struct Case {
  std::string text;
  std::vector<std::string> pieces;
};

// Expected pieces from HF tokenizers' pre_tokenizer.preTokenizeString (Qwen3 tokenizer.json).
TEST(Qwen2PreTokenizerTest, MatchesHuggingFace) {
  const std::vector<Case> cases = {
      {"Hello world", {"Hello", " world"}},
      {"  two spaces", {" ", " two", " spaces"}},
      {"a  b", {"a", " ", " b"}},
      {"a \n b", {"a", " \n", " b"}},
      {"x\n\n\ny", {"x", "\n\n\n", "y"}},
      {"  \n  hello", {"  \n", " ", " hello"}},
      {"trailing   ", {"trailing", "   "}},
      {"\t\tTabs", {"\t", "\tTabs"}},
      {"I'M don'T you'Ll O'Neil", {"I", "'M", " don", "'T", " you", "'Ll", " O", "'Neil"}},
      {"'\u017F", {"'\u017F"}},
      {"'\u017Fx", {"'\u017F", "x"}},  // (?i) folds U+017F LONG S to 's'
      {"''s", {"''", "s"}},
      {"123abc", {"1", "2", "3", "abc"}},
      {"abc123", {"abc", "1", "2", "3"}},
      {"!!!\n\n", {"!!!\n\n"}},
      {"a.\r\nb", {"a", ".\r\n", "b"}},
      {" ?!x", {" ?!", "x"}},
      {"\u3000b", {"\u3000b"}},  // U+3000 is \s but not \r\n: it prefixes the letters
      {"x\u0085\u0085y", {"x", "\u0085", "\u0085y"}},
      {"\u00E9!", {"\u00E9", "!"}},
      {"$ 5", {"$", " ", "5"}},
      {" \n", {" \n"}},
      {"\u00A0\u00A0x", {"\u00A0", "\u00A0x"}},
      {"x\u0345y", {"x", "\u0345y"}},  // a combining mark is not \p{L}
      // Unicode 16.0 / 15.1 letters and digits, which utf8proc 2.8 does not know.
      {"\u1C89x \U0002EBF0\U00010D40\U00010D41",
       {"\u1C89x", " \U0002EBF0", "\U00010D40", "\U00010D41"}},
      {"a\U000105C0b", {"a\U000105C0b"}},
      {"", {}},
  };
  for (const Case& c : cases) EXPECT_EQ(Split(c.text), c.pieces) << QuoteBytes(c.text);
}

TEST(Qwen2PreTokenizerTest, WhitespaceRuns) {
  // \s+(?!\S) leaves the last space of a run for the next word; at the end it takes all.
  EXPECT_EQ(Split("a    b"), (std::vector<std::string>{"a", "   ", " b"}));
  EXPECT_EQ(Split("a \t b"), (std::vector<std::string>{"a", " \t", " b"}));
  EXPECT_EQ(Split("a\t\t"), (std::vector<std::string>{"a", "\t\t"}));
  // \s*[\r\n]+ takes white space up to the last newline of a run.
  EXPECT_EQ(Split("a \n \n  b"), (std::vector<std::string>{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(Split("\r\n\r\n"), (std::vector<std::string>{"\r\n\r\n"}));
  // A lone space before a digit or symbol run.
  EXPECT_EQ(Split("x 1"), (std::vector<std::string>{"x", " ", "1"}));
  EXPECT_EQ(Split("x ++"), (std::vector<std::string>{"x", " ++"}));
}

TEST(Qwen2PreTokenizerTest, PiecesCoverTheText) {
  const std::string text = "Mixed 中文 text, with 123 numbers!\n\n\tAnd 'quotes' — ok?  \r\n";
  std::string joined;
  for (const std::string& piece : Split(text)) {
    EXPECT_FALSE(piece.empty());
    joined += piece;
  }
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace pocket
