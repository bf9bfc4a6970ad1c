#include "generate/drafter.h"

#include <algorithm>

namespace pocket {

Status PromptLookupOptions::Validate() const {
  if (min_ngram < 1 || max_ngram < min_ngram || max_ngram > 64) {
    return InvalidArgumentError("prompt lookup n-gram sizes must satisfy 1 <= min (", min_ngram,
                                ") <= max (", max_ngram, ") <= 64");
  }
  if (max_branches < 1 || max_branches > kMaxDraftBranches) {
    return InvalidArgumentError("prompt lookup branches must be between 1 and ", kMaxDraftBranches,
                                ", got ", max_branches);
  }
  return Status::Ok();
}

Status PromptLookupDrafter::Draft(std::span<const int32_t> context, int32_t max_tokens,
                                  std::vector<int32_t>* draft) {
  POCKET_RETURN_IF_ERROR(options_.Validate());
  draft->clear();
  const int64_t n = static_cast<int64_t>(context.size());
  if (max_tokens <= 0) return Status::Ok();
  for (int64_t len = std::min<int64_t>(options_.max_ngram, n - 1); len >= options_.min_ngram;
       --len) {
    const std::span<const int32_t> tail = context.subspan(static_cast<size_t>(n - len));
    // The most recent earlier occurrence: start positions from n - len - 1 down to 0.
    for (int64_t start = n - len - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + start)) continue;
      const int64_t from = start + len;  // the tokens that followed it (before the tail itself)
      const int64_t count = std::min<int64_t>(max_tokens, n - from);
      for (int64_t i = 0; i < count; ++i) draft->push_back(context[static_cast<size_t>(from + i)]);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status PromptLookupDrafter::DraftTree(std::span<const int32_t> context, int32_t max_tokens,
                                      std::vector<DraftNode>* tree) {
  POCKET_RETURN_IF_ERROR(options_.Validate());
  tree->clear();
  const int64_t n = static_cast<int64_t>(context.size());
  if (max_tokens <= 0) return Status::Ok();
  // Where each branch's continuation starts, and how long it can be (fixed arrays: no allocation).
  int64_t from[kMaxDraftBranches];
  int64_t avail[kMaxDraftBranches];
  int32_t m = 0;
  for (int64_t len = std::min<int64_t>(options_.max_ngram, n - 1);
       len >= options_.min_ngram && m < options_.max_branches; --len) {
    const std::span<const int32_t> tail = context.subspan(static_cast<size_t>(n - len));
    for (int64_t start = n - len - 1; start >= 0 && m < options_.max_branches; --start) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + start)) continue;
      const int64_t f = start + len;
      if (f >= n) continue;
      bool seen = false;
      for (int32_t b = 0; b < m; ++b)
        seen |= context[static_cast<size_t>(from[b])] == context[static_cast<size_t>(f)];
      if (seen) continue;
      from[m] = f;
      avail[m] = n - f;
      ++m;
    }
  }
  if (m == 0) return Status::Ok();
  // One branch: all of the budget; several: the first about half, the others the rest in equal
  // shares (at least one node each, while the budget lasts).
  const int64_t alt = m == 1 ? 0 : std::max<int64_t>(1, max_tokens / (2 * (m - 1)));
  int64_t budget = max_tokens;
  for (int32_t b = 0; b < m && budget > 0; ++b) {
    const int64_t share = b == 0 ? std::max<int64_t>(1, max_tokens - alt * (m - 1)) : alt;
    const int64_t count = std::min({share, avail[b], budget});
    for (int64_t i = 0; i < count; ++i) {
      const int32_t parent = i == 0 ? -1 : static_cast<int32_t>(tree->size()) - 1;
      tree->push_back({context[static_cast<size_t>(from[b] + i)], parent});
    }
    budget -= count;
  }
  return Status::Ok();
}

}  // namespace pocket
