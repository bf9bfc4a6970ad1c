#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <map>

namespace pocket {
namespace {

// Symbols are small ints; merges map (left, right) -> (rank, merged).
struct ToyMerges {
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> table;
  bool operator()(int32_t left, int32_t right, MergeCandidate<int32_t>* out) const {
    auto it = table.find({left, right});
    if (it == table.end()) return false;
    *out = {it->second.first, it->second.second};
    return true;
  }
};

std::vector<int32_t> Merge(const ToyMerges& merges, std::vector<int32_t> ids) {
  BpeScratch<int32_t> scratch;
  MergeSymbols(&ids, merges, &scratch);
  return ids;
}

TEST(BpeTest, MergesByRank) {
  // a=1 b=2 c=3; ab=10 (rank 1), bc=11 (rank 0), abc=12 from (a, bc) rank 2.
  ToyMerges merges;
  merges.table[{1, 2}] = {1, 10};
  merges.table[{2, 3}] = {0, 11};
  merges.table[{1, 11}] = {2, 12};
  EXPECT_EQ(Merge(merges, {1, 2, 3}), (std::vector<int32_t>{12}));  // bc first, then a+bc
  EXPECT_EQ(Merge(merges, {1, 2}), (std::vector<int32_t>{10}));
  EXPECT_EQ(Merge(merges, {3, 1}), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(Merge(merges, {}), (std::vector<int32_t>{}));
  EXPECT_EQ(Merge(merges, {2}), (std::vector<int32_t>{2}));
}

TEST(BpeTest, EqualRanksMergeLeftmostFirst) {
  // a=1, aa=2 (rank 0), aaaa=3 from (aa, aa) rank 1.
  ToyMerges merges;
  merges.table[{1, 1}] = {0, 2};
  merges.table[{2, 2}] = {1, 3};
  EXPECT_EQ(Merge(merges, {1, 1, 1}), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(Merge(merges, {1, 1, 1, 1, 1}), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(Merge(merges, {1, 1, 1, 1, 1, 1, 1, 1}), (std::vector<int32_t>{3, 3}));
}

TEST(BpeTest, StaleCandidatesAreSkipped) {
  // x=1 y=2 z=3: (y,z) rank 0 -> 20 makes the earlier (x,y) candidate stale.
  ToyMerges merges;
  merges.table[{1, 2}] = {5, 10};
  merges.table[{2, 3}] = {0, 20};
  EXPECT_EQ(Merge(merges, {1, 2, 3}), (std::vector<int32_t>{1, 20}));
}

TEST(BpeTest, FloatPriorities) {
  // Llama2.c style: priority = -score; the leftmost of equal scores wins.
  auto lookup = [](int32_t left, int32_t right, MergeCandidate<float>* out) {
    if (left == 1 && right == 1) {
      *out = {-1.5f, 7};
      return true;
    }
    return false;
  };
  std::vector<int32_t> ids = {1, 1, 1};
  BpeScratch<float> scratch;
  MergeSymbols(&ids, lookup, &scratch);
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 1}));
}

}  // namespace
}  // namespace pocket
