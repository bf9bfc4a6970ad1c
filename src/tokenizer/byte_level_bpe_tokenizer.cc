#include "tokenizer/byte_level_bpe_tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/qwen2_pretokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

bool IsAdded(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

}  // namespace

// Per-call scratch: nothing in it outlives one Encode, so the tokenizer itself stays immutable.
struct ByteLevelBpeTokenizer::EncodeState {
  std::string normalized;
  std::vector<std::string_view> pieces;
  Qwen2PreTokenizer pre_tokenizer;
  BpeScratch<int32_t> bpe;
  std::vector<int32_t> word_ids;
  // Words already encoded in this call (HF keeps a similar cache in its BPE model; ours lives
  // only as long as the call, so nothing is shared between threads). Word i of `cache_words` has
  // the ids cache_ids[cache_ranges[i].first, cache_ranges[i].second).
  StringTable cache_words;
  std::vector<std::pair<uint32_t, uint32_t>> cache_ranges;
  std::vector<int32_t> cache_ids;
  bool cache_enabled = false;
  int32_t cache_max_words = 0;
  // A direct-mapped cache of merge lookups (left, right) -> (rank, merged id or -1): the pair
  // table is megabytes, the pairs of one text are few and repeat.
  struct PairCacheEntry {
    uint64_t key = ~0ull;
    PairTable::Value value{};
  };
  std::vector<PairCacheEntry> pair_cache;  // empty: disabled
};

namespace {
constexpr size_t kCacheMinTextBytes = 2048;  // shorter texts rarely repeat a word or pair
constexpr int32_t kCacheMaxWords = 32768;
constexpr size_t kCacheMaxWordBytes = 24;
constexpr size_t kPairCacheMaxEntries = 1 << 16;  // 1 MB
}  // namespace

StatusOr<std::shared_ptr<const Tokenizer>> ByteLevelBpeTokenizer::Create(TokenizerSpec spec) {
  std::shared_ptr<ByteLevelBpeTokenizer> tokenizer(new ByteLevelBpeTokenizer(std::move(spec)));
  POCKET_RETURN_IF_ERROR(tokenizer->Build());
  return std::shared_ptr<const Tokenizer>(std::move(tokenizer));
}

Status ByteLevelBpeTokenizer::Build() {
  const TokenizerSpec& spec = spec_;
  if (spec.pre_tokenizer != "qwen2") {
    return UnimplementedError("byte-level BPE pre-tokenizer \"", spec.pre_tokenizer,
                              "\" is not implemented (supported: qwen2)");
  }
  const auto n = static_cast<int32_t>(spec.tokens.size());
  std::string decoded;
  size_t n_regular = 0;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& stored = spec.tokens[id];
    const TokenType type = spec.types.empty() ? TokenType::kNormal : spec.types[id];
    if (IsAdded(type)) {
      bytes_.Add(stored);
      added_.Add(stored, id, type == TokenType::kControl);
      added_ids_.emplace(stored, id);
      continue;
    }
    decoded.clear();
    if (!byte_level::DecodeToken(stored, &decoded)) {
      if (type != TokenType::kUnused) {
        return DataLossError("token ", id, " ", QuoteBytes(stored),
                             " is not written in the byte-level alphabet");
      }
      decoded = stored;
    }
    bytes_.Add(decoded);
    if (type != TokenType::kUnused) ++n_regular;
  }
  added_.Finalize();
  bytes_.ReserveIndex(n_regular);
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = spec.types.empty() ? TokenType::kNormal : spec.types[id];
    if (!IsAdded(type) && type != TokenType::kUnused) bytes_.Index(id);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_ids_[b] = bytes_.Find(std::string_view(&byte, 1));
    if (byte_ids_[b] < 0) {
      return DataLossError("the vocabulary has no token for byte ", b, " (written ",
                           QuoteBytes(byte_level::EncodeBytes(std::string_view(&byte, 1))),
                           "), so some text could not be encoded");
    }
  }
  if (spec_.merges.empty() && !spec_.merge_ids.empty()) {
    POCKET_RETURN_IF_ERROR(BuildMergesFromIds());
  } else {
    merge_ids_.reserve(spec_.merges.size());
    POCKET_RETURN_IF_ERROR(BuildMerges());
  }
  // The tables hold what encoding needs; the token and merge strings would only cost memory
  // (about 2.5 MB for a 65,536-token vocabulary): FullSpec() rebuilds them.
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = spec.types.empty() ? TokenType::kNormal : spec.types[id];
    if (IsAdded(type)) continue;
    const std::string& stored = spec_.tokens[static_cast<size_t>(id)];
    if (byte_level::EncodeBytes(bytes_.Get(id)) != stored)
      irregular_tokens_.emplace_back(id, stored);
  }
  spec_.tokens = {};
  spec_.merges = {};
  spec_.merge_ids = {};
  return Status::Ok();
}

TokenizerSpec ByteLevelBpeTokenizer::FullSpec() const {
  TokenizerSpec full = spec_;
  full.tokens.resize(static_cast<size_t>(n_tokens_));
  for (int32_t id = 0; id < n_tokens_; ++id) {
    const TokenType type = spec_.types.empty() ? TokenType::kNormal : spec_.types[id];
    full.tokens[static_cast<size_t>(id)] =
        IsAdded(type) ? std::string(bytes_.Get(id)) : byte_level::EncodeBytes(bytes_.Get(id));
  }
  for (const auto& [id, stored] : irregular_tokens_) full.tokens[static_cast<size_t>(id)] = stored;
  full.merges.reserve(merge_ids_.size());
  for (const auto& [left, right] : merge_ids_) {
    full.merges.emplace_back(full.tokens[static_cast<size_t>(left)],
                             full.tokens[static_cast<size_t>(right)]);
  }
  return full;
}

// Merges are resolved in chunks so that the hash-table probes of a chunk can be prefetched
// together: at 150K merges, waiting for one cache miss at a time is most of the load time.
Status ByteLevelBpeTokenizer::BuildMerges() {
  const auto& merges = spec_.merges;
  merges_.Reserve(merges.size());
  dense_pairs_.assign(static_cast<size_t>(kDensePairIds) * kDensePairIds, PairTable::Value{-1, -1});
  constexpr size_t kChunk = 1024;
  std::string arena;                   // left, right and merged bytes of every merge in the chunk
  std::vector<size_t> ends;            // end offset of each string in the arena
  std::vector<std::string_view> keys;  // 3 per merge
  std::vector<int32_t> ids;
  std::vector<std::string_view> lookups;  // the keys that need the hash table
  std::vector<size_t> lookup_slots;       // where their ids go in `ids`
  std::vector<int32_t> found;
  int64_t guess_offset = -1;  // merged token id - merge rank, when that is constant
  for (size_t chunk = 0; chunk < merges.size(); chunk += kChunk) {
    const size_t n = std::min(kChunk, merges.size() - chunk);
    arena.clear();
    ends.clear();
    for (size_t k = 0; k < n; ++k) {
      const auto& [left_stored, right_stored] = merges[chunk + k];
      const size_t start = arena.size();
      if (!byte_level::DecodeToken(left_stored, &arena)) {
        return MergeError(chunk + k, "its left part is not written in the byte-level alphabet");
      }
      const size_t middle = arena.size();
      if (!byte_level::DecodeToken(right_stored, &arena)) {
        return MergeError(chunk + k, "its right part is not written in the byte-level alphabet");
      }
      const size_t end = arena.size();
      arena.reserve(end + (end - start));       // no reallocation while appending from itself
      arena.append(arena, start, end - start);  // the merged token
      ends.push_back(middle);
      ends.push_back(end);
      ends.push_back(arena.size());
    }
    keys.clear();
    for (size_t i = 0, start = 0; i < ends.size(); start = ends[i++]) {
      // The merged string starts where the right part ends.
      keys.emplace_back(arena.data() + start, ends[i] - start);
    }
    ids.resize(keys.size());
    // Vocabularies usually list merged tokens in merge order (Qwen: merge r makes token 256 + r),
    // so token rank + offset is checked first, cheaply and in sequence; only misses go to the hash
    // table. The offset comes from the first merge; guessing stops if it does not pay off.
    if (chunk == 0 && n > 0) guess_offset = bytes_.Find(keys[2]);
    lookups.clear();
    lookup_slots.clear();
    size_t hits = 0;
    for (size_t k = 0; k < n; ++k) {
      lookups.push_back(keys[3 * k]);
      lookups.push_back(keys[3 * k + 1]);
      lookup_slots.push_back(3 * k);
      lookup_slots.push_back(3 * k + 1);
      const int64_t guess = guess_offset + static_cast<int64_t>(chunk + k);
      if (guess_offset >= 0 && guess < bytes_.size() && IsRegular(static_cast<int32_t>(guess)) &&
          bytes_.Get(static_cast<int32_t>(guess)) == keys[3 * k + 2]) {
        ids[3 * k + 2] = static_cast<int32_t>(guess);
        ++hits;
      } else {
        lookups.push_back(keys[3 * k + 2]);
        lookup_slots.push_back(3 * k + 2);
      }
    }
    if (hits * 2 < n) guess_offset = -1;
    found.resize(lookups.size());
    bytes_.FindMany(lookups.data(), lookups.size(), found.data());
    for (size_t i = 0; i < lookups.size(); ++i) ids[lookup_slots[i]] = found[i];
    for (size_t k = 0; k < n; ++k) {
      if (ids[3 * k] >= 0 && ids[3 * k + 1] >= 0) merges_.Prefetch(ids[3 * k], ids[3 * k + 1]);
    }
    for (size_t k = 0; k < n; ++k) {
      const int32_t left = ids[3 * k], right = ids[3 * k + 1], merged = ids[3 * k + 2];
      if (left < 0 || right < 0 || merged < 0) {
        return MergeError(chunk + k, left < 0    ? "its left part is not in the vocabulary"
                                     : right < 0 ? "its right part is not in the vocabulary"
                                                 : "the merged token is not in the vocabulary");
      }
      const PairTable::Value value = {static_cast<int32_t>(chunk + k), merged};
      merges_.Set(left, right, value);
      merge_ids_.emplace_back(left, right);
      if (left < kDensePairIds && right < kDensePairIds) {
        dense_pairs_[static_cast<size_t>(left) * kDensePairIds + right] = value;
      }
    }
  }
  return Status::Ok();
}

// The .pocket form: merges by token id, so the merged bytes are the parts' bytes joined.
Status ByteLevelBpeTokenizer::BuildMergesFromIds() {
  const auto n_tokens = static_cast<int32_t>(spec_.tokens.size());
  merge_ids_ = std::move(spec_.merge_ids);
  merges_.Reserve(merge_ids_.size());
  dense_pairs_.assign(static_cast<size_t>(kDensePairIds) * kDensePairIds, PairTable::Value{-1, -1});
  std::string merged_bytes;
  int64_t guess_offset = -1;  // merged token id - merge rank, when that is constant (see above)
  size_t guess_hits = 0;
  for (size_t rank = 0; rank < merge_ids_.size(); ++rank) {
    // Plain variables, not a structured binding: lambdas may capture those only from C++20 on in
    // clang 16 (the fuzz build uses Debian's clang 14).
    const int32_t left = merge_ids_[rank].first, right = merge_ids_[rank].second;
    const auto error = [&](std::string_view problem) {
      const bool ok_left = left >= 0 && left < n_tokens, ok_right = right >= 0 && right < n_tokens;
      return DataLossError(
          "merge ", rank, " (token ", left, " ",
          ok_left ? QuoteBytes(spec_.tokens[left]) : std::string("?"), ", token ", right, " ",
          ok_right ? QuoteBytes(spec_.tokens[right]) : std::string("?"), "): ", problem);
    };
    if (left < 0 || left >= n_tokens || !IsRegular(left))
      return error("its left part is not a regular token of the vocabulary");
    if (right < 0 || right >= n_tokens || !IsRegular(right))
      return error("its right part is not a regular token of the vocabulary");
    merged_bytes.assign(bytes_.Get(left));
    merged_bytes.append(bytes_.Get(right));
    int32_t merged = -1;
    const int64_t guess = guess_offset + static_cast<int64_t>(rank);
    if (guess_offset >= 0 && guess < bytes_.size() && IsRegular(static_cast<int32_t>(guess)) &&
        bytes_.Get(static_cast<int32_t>(guess)) == merged_bytes) {
      merged = static_cast<int32_t>(guess);
      ++guess_hits;
    } else {
      merged = bytes_.Find(merged_bytes);
      if (rank == 0 && merged >= 0) guess_offset = merged;
    }
    if (rank == 1024 && guess_hits * 2 < rank) guess_offset = -1;
    if (merged < 0) return error("the merged token is not in the vocabulary");
    const PairTable::Value value = {static_cast<int32_t>(rank), merged};
    merges_.Set(left, right, value);
    if (left < kDensePairIds && right < kDensePairIds) {
      dense_pairs_[static_cast<size_t>(left) * kDensePairIds + right] = value;
    }
  }
  return Status::Ok();
}

Status ByteLevelBpeTokenizer::MergeError(size_t rank, std::string_view problem) const {
  const auto& [left, right] = spec_.merges[rank];
  return DataLossError("merge ", rank, " (", QuoteBytes(left), " ", QuoteBytes(right),
                       "): ", problem);
}

bool ByteLevelBpeTokenizer::IsRegular(int32_t id) const {
  const TokenType type = spec_.types.empty() ? TokenType::kNormal : spec_.types[id];
  return !IsAdded(type) && type != TokenType::kUnused;
}

StatusOr<std::vector<int32_t>> ByteLevelBpeTokenizer::Encode(std::string_view text,
                                                             const EncodeOptions& options) const {
  POCKET_RETURN_IF_ERROR(utf8::Validate(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_bos && spec_.bos_id >= 0) ids.push_back(spec_.bos_id);
  EncodeState state;
  if (text.size() >= kCacheMinTextBytes) {
    // Sized to the text: zeroing megabytes would cost more than encoding a few kilobytes.
    state.cache_enabled = true;
    state.cache_max_words =
        static_cast<int32_t>(std::min<size_t>(kCacheMaxWords, text.size() / 16));
    state.cache_words.ReserveIndex(static_cast<size_t>(state.cache_max_words));
    size_t pair_entries = 1024;
    while (pair_entries < kPairCacheMaxEntries && pair_entries * 8 < text.size()) pair_entries *= 2;
    state.pair_cache.resize(pair_entries);
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    const AddedTokenMatcher::Match match = added_.FindNext(text, pos, options.parse_special);
    EncodeSegment(text.substr(pos, match.begin - pos), &state, &ids);
    if (match.length == 0) break;
    ids.push_back(match.id);
    pos = match.begin + match.length;
  }
  return ids;
}

void ByteLevelBpeTokenizer::EncodeSegment(std::string_view text, EncodeState* state,
                                          std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  std::string_view normalized = text;
  if (spec_.normalize_nfc) {
    state->normalized.clear();
    unicode::AppendNfc(text, &state->normalized);
    normalized = state->normalized;
  }
  state->pieces.clear();
  state->pre_tokenizer.Split(normalized, &state->pieces);
  for (std::string_view piece : state->pieces) EncodeWord(piece, state, ids);
}

void ByteLevelBpeTokenizer::EncodeWord(std::string_view word, EncodeState* state,
                                       std::vector<int32_t>* ids) const {
  if (word.size() == 1) {
    ids->push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  const bool cacheable = state->cache_enabled && word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    const int32_t cached = state->cache_words.Find(word);
    if (cached >= 0) {
      const auto [begin, end] = state->cache_ranges[cached];
      ids->insert(ids->end(), state->cache_ids.begin() + begin, state->cache_ids.begin() + end);
      return;
    }
  }
  std::vector<int32_t>& symbols = state->word_ids;
  symbols.clear();
  for (char c : word) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  auto lookup = [this, state](int32_t left, int32_t right, MergeCandidate<int32_t>* candidate) {
    if (left < kDensePairIds && right < kDensePairIds) {
      const PairTable::Value& merge =
          dense_pairs_[static_cast<size_t>(left) * kDensePairIds + right];
      *candidate = {merge.rank, merge.id};
      return merge.id >= 0;
    }
    if (!state->pair_cache.empty()) {
      const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
      auto& entry = state->pair_cache[HashU64(key) & (state->pair_cache.size() - 1)];
      if (entry.key != key) {
        const PairTable::Value* merge = merges_.Find(left, right);
        entry = {key, merge != nullptr ? *merge : PairTable::Value{-1, -1}};
      }
      *candidate = {entry.value.rank, entry.value.id};
      return entry.value.id >= 0;
    }
    const PairTable::Value* merge = merges_.Find(left, right);
    if (merge == nullptr) return false;
    *candidate = {merge->rank, merge->id};
    return true;
  };
  MergeSymbols(&symbols, lookup, &state->bpe);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  if (cacheable && state->cache_words.size() < state->cache_max_words) {
    state->cache_words.Index(state->cache_words.Add(word));
    const auto begin = static_cast<uint32_t>(state->cache_ids.size());
    state->cache_ids.insert(state->cache_ids.end(), symbols.begin(), symbols.end());
    state->cache_ranges.emplace_back(begin, static_cast<uint32_t>(state->cache_ids.size()));
  }
}

std::string_view ByteLevelBpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= bytes_.size()) return {};
  return bytes_.Get(id);
}

int32_t ByteLevelBpeTokenizer::FindToken(std::string_view stored) const {
  if (auto it = added_ids_.find(std::string(stored)); it != added_ids_.end()) return it->second;
  std::string bytes;
  if (!byte_level::DecodeToken(stored, &bytes)) return -1;
  return bytes_.Find(bytes);
}

}  // namespace pocket
