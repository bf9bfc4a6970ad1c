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

// Trees: the continuations of several matches with different next tokens, most recent first; the
// first branch about half the budget, the others the rest.
TEST(PromptLookupTest, TreesBranchOnDifferentContinuations) {
  PromptLookupDrafter d({.min_ngram = 2, .max_ngram = 3, .max_branches = 4});
  EXPECT_TRUE(d.branching());
  std::vector<DraftNode> tree;
  const std::vector<int32_t> context = {1, 2, 3, 1, 2, 4, 1, 2, 5, 9, 1, 2};
  ASSERT_TRUE(d.DraftTree(context, 8, &tree).ok());
  std::vector<std::pair<int32_t, int32_t>> got;
  for (const DraftNode& n : tree) got.emplace_back(n.token, n.parent);
  const std::vector<std::pair<int32_t, int32_t>> want = {{5, -1}, {9, 0}, {1, 1},  {2, 2},
                                                         {4, -1}, {1, 4}, {3, -1}, {1, 6}};
  EXPECT_EQ(got, want);
  // Matches that continue alike make one branch (a chain, all of the budget).
  ASSERT_TRUE(d.DraftTree(std::vector<int32_t>{1, 2, 3, 4, 1, 2, 3, 5, 1, 2}, 3, &tree).ok());
  got.clear();
  for (const DraftNode& n : tree) got.emplace_back(n.token, n.parent);
  EXPECT_EQ(got, (std::vector<std::pair<int32_t, int32_t>>{{3, -1}, {5, 0}, {1, 1}}));
  // No match, no tree; a single-branch drafter does not branch.
  ASSERT_TRUE(d.DraftTree(std::vector<int32_t>{1, 2, 3}, 8, &tree).ok());
  EXPECT_TRUE(tree.empty());
  EXPECT_FALSE(PromptLookupDrafter({.min_ngram = 1, .max_ngram = 2}).branching());
  PromptLookupDrafter nine({.min_ngram = 1, .max_ngram = 2, .max_branches = 9});
  const Status s = nine.DraftTree(context, 8, &tree);
  EXPECT_NE(s.message().find("branches must be between 1 and 8, got 9"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace pocket
