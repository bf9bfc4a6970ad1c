#include "tokenizer/added_tokens.h"

#include <gtest/gtest.h>

namespace pocket {
namespace {

TEST(AddedTokensTest, LeftmostLongest) {
  AddedTokenMatcher matcher;
  matcher.Add("<a>", 1, true);
  matcher.Add("<a><b>", 2, true);
  matcher.Add("b>", 3, false);
  matcher.Add("", 4, false);  // ignored
  matcher.Finalize();
  auto m = matcher.FindNext("xx<a><b>yy", 0, true);
  EXPECT_EQ(m.begin, 2u);
  EXPECT_EQ(m.length, 6u);
  EXPECT_EQ(m.id, 2);
  // Leftmost wins over longer-but-later: "<a>" at 0 before "b>" at 4.
  m = matcher.FindNext("<a>b>", 0, true);
  EXPECT_EQ(m.id, 1);
  m = matcher.FindNext("<a>b>", 3, true);
  EXPECT_EQ(m.begin, 3u);
  EXPECT_EQ(m.id, 3);
  // Without special tokens only "b>" is found.
  m = matcher.FindNext("<a><b>", 0, false);
  EXPECT_EQ(m.begin, 4u);
  EXPECT_EQ(m.id, 3);
  m = matcher.FindNext("nothing", 0, true);
  EXPECT_EQ(m.length, 0u);
  EXPECT_EQ(m.begin, 7u);
}

}  // namespace
}  // namespace pocket
