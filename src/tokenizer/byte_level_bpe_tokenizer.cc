#include "tokenizer/byte_level_bpe_tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hash_tables.h"
#include "tokenizer/qwen2_pretokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

bool IsAdded(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

Status CheckPreTokenizer(const TokenizerSpec& spec) {
  if (spec.pre_tokenizer == "qwen2") return Status::Ok();
  return UnimplementedError("byte-level BPE pre-tokenizer \"", spec.pre_tokenizer,
                            "\" is not implemented (supported: qwen2)");
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
    BpeTables::Merge value{};
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
  POCKET_RETURN_IF_ERROR(CheckPreTokenizer(spec));
  POCKET_ASSIGN_OR_RETURN(std::vector<uint32_t> image, BpeTables::Build(spec));
  // The tables hold what encoding needs; the token and merge strings would only cost memory
  // (megabytes for a large vocabulary): FullSpec() rebuilds them.
  spec.tokens = {};
  spec.merges = {};
  spec.merge_ids = {};
  std::shared_ptr<ByteLevelBpeTokenizer> tokenizer(new ByteLevelBpeTokenizer(std::move(spec)));
  tokenizer->owned_image_ = std::move(image);
  tokenizer->image_ = tokenizer->owned_image_;
  POCKET_ASSIGN_OR_RETURN(BpeTables tables, BpeTables::Parse(tokenizer->image_, "tokenizer"));
  POCKET_RETURN_IF_ERROR(tokenizer->Init(tables));
  return std::shared_ptr<const Tokenizer>(std::move(tokenizer));
}

StatusOr<std::shared_ptr<const Tokenizer>> ByteLevelBpeTokenizer::FromTables(
    TokenizerSpec meta, std::span<const uint32_t> words, std::shared_ptr<const void> keep_alive,
    const std::string& name) {
  POCKET_ASSIGN_OR_RETURN(BpeTables tables, BpeTables::Parse(words, name));
  for (int32_t id : {meta.bos_id, meta.eos_id, meta.pad_id, meta.unk_id}) {
    if (id < -1 || id >= tables.n_tokens()) {
      return DataLossError(name, ": special token id ", id, " is outside the vocabulary (",
                           tables.n_tokens(), " tokens)");
    }
  }
  meta.tokens = {};
  meta.merges = {};
  meta.merge_ids = {};
  std::shared_ptr<ByteLevelBpeTokenizer> tokenizer(new ByteLevelBpeTokenizer(std::move(meta)));
  tokenizer->keep_alive_ = std::move(keep_alive);
  tokenizer->image_ = words;
  Status status = tokenizer->Init(tables);
  if (!status.ok()) return status.WithContext(name);
  return std::shared_ptr<const Tokenizer>(std::move(tokenizer));
}

Status ByteLevelBpeTokenizer::Init(const BpeTables& tables) {
  POCKET_RETURN_IF_ERROR(CheckPreTokenizer(spec_));
  tables_ = tables;
  n_tokens_ = tables_.n_tokens();
  spec_.types = {};  // read from the tables
  for (int32_t id = 0; id < n_tokens_; ++id) {
    const TokenType type = tables_.type(id);
    if (IsAdded(type)) {
      const std::string_view text = tables_.Bytes(id);
      added_.Add(text, id, type == TokenType::kControl);
      added_ids_.emplace(std::string(text), id);
    }
  }
  added_.Finalize();
  return Status::Ok();
}

TokenizerSpec ByteLevelBpeTokenizer::FullSpec() const {
  TokenizerSpec full = spec_;
  full.tokens.resize(static_cast<size_t>(n_tokens_));
  full.types.resize(static_cast<size_t>(n_tokens_));
  for (int32_t id = 0; id < n_tokens_; ++id) {
    full.types[static_cast<size_t>(id)] = tables_.type(id);
    const std::string_view bytes = tables_.Bytes(id);
    full.tokens[static_cast<size_t>(id)] =
        IsAdded(tables_.type(id)) ? std::string(bytes) : byte_level::EncodeBytes(bytes);
  }
  for (auto& [id, stored] : tables_.IrregularTokens())
    full.tokens[static_cast<size_t>(id)] = std::move(stored);
  full.merges.reserve(static_cast<size_t>(tables_.n_merges()));
  for (int32_t rank = 0; rank < tables_.n_merges(); ++rank) {
    const auto [left, right] = tables_.MergeParts(rank);
    if (static_cast<uint32_t>(left) >= static_cast<uint32_t>(n_tokens_) ||
        static_cast<uint32_t>(right) >= static_cast<uint32_t>(n_tokens_)) {
      continue;  // only if the mapped file changed after the check
    }
    full.merges.emplace_back(full.tokens[static_cast<size_t>(left)],
                             full.tokens[static_cast<size_t>(right)]);
  }
  return full;
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
    ids->push_back(tables_.ByteId(static_cast<uint8_t>(word[0])));
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
  for (char c : word) symbols.push_back(tables_.ByteId(static_cast<uint8_t>(c)));
  auto lookup = [this, state](int32_t left, int32_t right, MergeCandidate<int32_t>* candidate) {
    BpeTables::Merge merge;
    if (!state->pair_cache.empty()) {
      const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
      auto& entry = state->pair_cache[HashU64(key) & (state->pair_cache.size() - 1)];
      if (entry.key != key) entry = {key, tables_.FindMerge(left, right)};
      merge = entry.value;
    } else {
      merge = tables_.FindMerge(left, right);
    }
    *candidate = {merge.rank, merge.id};
    return merge.id >= 0;
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
  if (id < 0 || id >= n_tokens_) return {};
  return tables_.Bytes(id);
}

int32_t ByteLevelBpeTokenizer::FindToken(std::string_view stored) const {
  if (auto it = added_ids_.find(std::string(stored)); it != added_ids_.end()) return it->second;
  std::string bytes;
  if (!byte_level::DecodeToken(stored, &bytes)) return -1;
  return tables_.Find(bytes);
}

}  // namespace pocket
