#include "generate/drafter.h"

#include <algorithm>

namespace pocket {

Status PromptLookupOptions::Validate() const {
  if (min_ngram < 1 || max_ngram < min_ngram || max_ngram > 64) {
    return InvalidArgumentError("prompt lookup n-gram sizes must satisfy 1 <= min (", min_ngram,
                                ") <= max (", max_ngram, ") <= 64");
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

}  // namespace pocket
