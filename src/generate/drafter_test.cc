#include "generate/drafter.h"

#include <gtest/gtest.h>

namespace pocket {
namespace {

std::vector<int32_t> DraftOf(PromptLookupDrafter& d, std::vector<int32_t> context, int32_t max) {
  std::vector<int32_t> out = {99};  // cleared by Draft
  EXPECT_TRUE(d.Draft(context, max, &out).ok());
  return out;
}

TEST(PromptLookupTest, ProposesWhatFollowedTheMostRecentMatch) {
  PromptLookupDrafter d({.min_ngram = 2, .max_ngram = 3});
  // "1 2 3 4 5 ... 1 2 3" -> the tokens after the earlier "1 2 3": 4 5 6.
  EXPECT_EQ(DraftOf(d, {1, 2, 3, 4, 5, 6, 7, 1, 2, 3}, 3), (std::vector<int32_t>{4, 5, 6}));
  // The most recent of two occurrences wins.
  EXPECT_EQ(DraftOf(d, {1, 2, 8, 9, 1, 2, 5, 6, 1, 2}, 2), (std::vector<int32_t>{5, 6}));
  // Longer n-grams first: "7 1 2" matches only the second occurrence's context.
  EXPECT_EQ(DraftOf(d, {7, 1, 2, 3, 0, 1, 2, 4, 7, 1, 2}, 1), (std::vector<int32_t>{3}));
  // The draft stops at the end of the context (a match right before the tail).
  EXPECT_EQ(DraftOf(d, {5, 6, 5, 6}, 8), (std::vector<int32_t>{5, 6}));
}

TEST(PromptLookupTest, NoMatchNoDraft) {
  PromptLookupDrafter d({.min_ngram = 2, .max_ngram = 4});
  EXPECT_TRUE(DraftOf(d, {1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(DraftOf(d, {1}, 4).empty());
  EXPECT_TRUE(DraftOf(d, {}, 4).empty());
  EXPECT_TRUE(DraftOf(d, {1, 2, 1, 2}, 0).empty());
  // One token of overlap is below min_ngram.
  EXPECT_TRUE(DraftOf(d, {1, 5, 6, 1}, 4).empty());
  PromptLookupDrafter one({.min_ngram = 1, .max_ngram = 4});
  EXPECT_EQ(DraftOf(one, {1, 5, 6, 1}, 4), (std::vector<int32_t>{5, 6, 1}));
}

TEST(PromptLookupTest, BadSizesAreErrors) {
  std::vector<int32_t> out;
  PromptLookupDrafter zero({.min_ngram = 0, .max_ngram = 2});
  EXPECT_FALSE(zero.Draft(std::vector<int32_t>{1, 2}, 2, &out).ok());
  PromptLookupDrafter inverted({.min_ngram = 3, .max_ngram = 2});
  const Status s = inverted.Draft(std::vector<int32_t>{1, 2}, 2, &out);
  EXPECT_NE(s.message().find("min (3)"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace pocket
