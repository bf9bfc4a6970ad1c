#include "tokenizer/vocab_fit.h"

#include <unordered_map>

#include "tokenizer/byte_level.h"

namespace pocket {
namespace {

bool IsAdded(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

}  // namespace

StatusOr<TokenizerSpec> TruncateVocab(const TokenizerSpec& full, int32_t new_size) {
  if (full.kind != TokenizerKind::kByteLevelBpe) {
    return UnimplementedError("vocabulary truncation is implemented for byte-level BPE only");
  }
  const size_t n = full.tokens.size();
  auto type_of = [&](size_t id) {
    return full.types.empty() ? TokenType::kNormal : full.types[id];
  };
  std::vector<int32_t> added, regular;
  for (size_t id = 0; id < n; ++id) {
    const TokenType type = type_of(id);
    if (IsAdded(type)) {
      added.push_back(static_cast<int32_t>(id));
    } else if (type != TokenType::kUnused) {
      regular.push_back(static_cast<int32_t>(id));
    }
  }
  const int64_t n_keep = static_cast<int64_t>(new_size) - static_cast<int64_t>(added.size());
  if (n_keep < 256 || n_keep > static_cast<int64_t>(regular.size())) {
    return InvalidArgumentError(
        "cannot cut the vocabulary to ", new_size, " tokens: it has ", regular.size(),
        " regular and ", added.size(),
        " added tokens, and at least 256 regular tokens (the bytes) must stay");
  }
  // Old id -> new id (-1: dropped).
  std::vector<int32_t> new_id(n, -1);
  TokenizerSpec out;
  out.kind = full.kind;
  out.pre_tokenizer = full.pre_tokenizer;
  out.normalize_nfc = full.normalize_nfc;
  out.add_bos = full.add_bos;
  out.chat_template = full.chat_template;
  auto keep = [&](int32_t old_id) {
    new_id[old_id] = static_cast<int32_t>(out.tokens.size());
    out.tokens.push_back(full.tokens[old_id]);
    out.types.push_back(type_of(old_id));
    if (!full.scores.empty()) out.scores.push_back(full.scores[old_id]);
  };
  for (int64_t i = 0; i < n_keep; ++i) keep(regular[i]);
  for (int32_t old_id : added) keep(old_id);

  // Merges: stored forms concatenate like the bytes they stand for.
  std::unordered_map<std::string_view, int32_t> kept_ids;
  kept_ids.reserve(static_cast<size_t>(n_keep));
  for (int64_t i = 0; i < n_keep; ++i) kept_ids.emplace(out.tokens[i], static_cast<int32_t>(i));
  std::vector<bool> built(static_cast<size_t>(n_keep), false);
  std::string merged;
  for (const auto& [left, right] : full.merges) {
    merged = left + right;
    auto it = kept_ids.find(merged);
    if (it == kept_ids.end() || !kept_ids.contains(left) || !kept_ids.contains(right)) continue;
    out.merges.emplace_back(left, right);
    built[it->second] = true;
  }
  // Closure: every byte is a kept token, and every longer kept token is built by a kept merge.
  for (int b = 0; b < 256; ++b) {
    const std::string stored = byte_level::EncodeBytes(std::string(1, static_cast<char>(b)));
    auto it = kept_ids.find(stored);
    if (it == kept_ids.end()) {
      return FailedPreconditionError("cutting the vocabulary to ", new_size,
                                     " tokens drops the token for byte ", b, " (",
                                     QuoteBytes(stored), ")");
    }
    built[it->second] = true;
  }
  for (int64_t i = 0; i < n_keep; ++i) {
    if (!built[i]) {
      return FailedPreconditionError(
          "cutting the vocabulary to ", new_size, " tokens is not closed under merges: token ",
          regular[i], " ", QuoteBytes(out.tokens[i]),
          " is kept but no kept merge builds it (are the ids in merge-rank order?)");
    }
  }
  struct Special {
    const char* name;
    int32_t old_id;
    int32_t* id;
  };
  for (const Special& s :
       {Special{"bos", full.bos_id, &out.bos_id}, Special{"eos", full.eos_id, &out.eos_id},
        Special{"pad", full.pad_id, &out.pad_id}, Special{"unk", full.unk_id, &out.unk_id}}) {
    if (s.old_id < 0) continue;
    if (s.old_id >= static_cast<int32_t>(n) || new_id[s.old_id] < 0) {
      return FailedPreconditionError("cutting the vocabulary to ", new_size, " tokens drops the ",
                                     s.name, " token ", s.old_id);
    }
    *s.id = new_id[s.old_id];
  }
  return out;
}

}  // namespace pocket
