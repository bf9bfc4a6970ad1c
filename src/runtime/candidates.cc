#include "runtime/candidates.h"

#include <algorithm>

#include "base/str.h"

namespace pocket {
namespace {

Status CheckNotEmpty(std::string_view text, size_t index) {
  if (text.empty()) return InvalidArgumentError("candidate ", index, " is empty");
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> EncodeAlone(const Tokenizer& tokenizer, std::string_view text,
                                           size_t index, EncodeOptions options) {
  options.add_bos = false;
  POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text, options));
  if (ids.empty()) {
    return InvalidArgumentError("candidate ", index, " (", QuoteBytes(text), ") has no tokens");
  }
  return ids;
}

}  // namespace

StatusOr<CandidateTokens> TokenizeCandidates(const Tokenizer& tokenizer, std::string_view prompt,
                                             std::span<const std::string> candidates,
                                             const EncodeOptions& options) {
  if (candidates.empty()) return InvalidArgumentError("no candidates");
  CandidateTokens out;
  POCKET_ASSIGN_OR_RETURN(out.prompt, tokenizer.Encode(prompt, options));
  std::string joined;
  for (size_t c = 0; c < candidates.size(); ++c) {
    POCKET_RETURN_IF_ERROR(CheckNotEmpty(candidates[c], c));
    joined.assign(prompt);
    joined += candidates[c];
    auto ids = tokenizer.Encode(joined, options);
    if (!ids.ok()) return ids.status().WithContext(StrCat("candidate ", c));
    const bool prefix = ids->size() > out.prompt.size() &&
                        std::equal(out.prompt.begin(), out.prompt.end(), ids->begin());
    if (prefix) {
      out.candidates.emplace_back(ids->begin() + static_cast<ptrdiff_t>(out.prompt.size()),
                                  ids->end());
      out.joint.push_back(true);
    } else {
      POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> alone,
                              EncodeAlone(tokenizer, candidates[c], c, options));
      out.candidates.push_back(std::move(alone));
      out.joint.push_back(false);
    }
  }
  return out;
}

StatusOr<std::vector<std::vector<int32_t>>> TokenizeCandidatesAlone(
    const Tokenizer& tokenizer, std::span<const std::string> candidates,
    const EncodeOptions& options) {
  if (candidates.empty()) return InvalidArgumentError("no candidates");
  std::vector<std::vector<int32_t>> out;
  for (size_t c = 0; c < candidates.size(); ++c) {
    POCKET_RETURN_IF_ERROR(CheckNotEmpty(candidates[c], c));
    POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                            EncodeAlone(tokenizer, candidates[c], c, options));
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace pocket
