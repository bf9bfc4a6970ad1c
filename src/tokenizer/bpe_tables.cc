#include "tokenizer/bpe_tables.h"

#include <bit>
#include <cstring>

#include "base/str.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hash_tables.h"

namespace pocket {
namespace {

constexpr uint32_t kMagic = 0x45504250;  // "PBPE"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kEmpty = ~0u;
constexpr uint32_t kMaxIdBits = 28;  // at least 4 bits of tag in every slot
// Header: magic, version, n_tokens, n_merges, id_bits, token_capacity, merge_capacity,
// blob_bytes, n_irregular, irregular_words, 6 reserved words (zero), then the 256 byte ids.
constexpr size_t kFixedWords = 16;
constexpr size_t kHeaderWords = kFixedWords + 256;

bool IsAdded(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}
bool IsRegular(TokenType type) {
  return !IsAdded(type) && type != TokenType::kUnused;
}

// Slots for `n` keys at a load factor of at most 0.7, with at least one slot left empty.
uint32_t CapacityFor(size_t n) {
  return static_cast<uint32_t>(n * 10 / 7 + 2);
}

// Where a key's probe starts, and its tag (the hash bits that the id leaves free in a slot).
struct Probe {
  uint32_t start;
  uint32_t tag;
};
Probe MakeProbe(uint64_t hash, uint32_t capacity, uint32_t id_bits) {
  return {
      static_cast<uint32_t>((static_cast<uint64_t>(static_cast<uint32_t>(hash)) * capacity) >> 32),
      static_cast<uint32_t>(hash >> 32) >> id_bits};
}
uint64_t PairHash(int32_t left, int32_t right) {
  return HashU64((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                 static_cast<uint32_t>(right));
}

struct Layout {  // in 64 bits, whatever size_t is
  uint64_t offsets = 0, token_slots = 0, merges = 0, results = 0, merge_slots = 0, types = 0,
           blob = 0, irregular = 0, total = 0;
};
// Word offsets of the arrays; false when the sizes overflow.
bool ComputeLayout(uint64_t n, uint64_t m, uint64_t token_capacity, uint64_t merge_capacity,
                   uint64_t blob_bytes, uint64_t irregular_words, Layout* l) {
  if (n > (1u << 30) || m > (1u << 30) || token_capacity > (1u << 31) ||
      merge_capacity > (1u << 31) || blob_bytes > (uint64_t{1} << 32) ||
      irregular_words > (uint64_t{1} << 32)) {
    return false;
  }
  l->offsets = kHeaderWords;
  l->token_slots = l->offsets + n + 1;
  l->merges = l->token_slots + token_capacity;
  l->results = l->merges + 2 * m;
  l->merge_slots = l->results + m;
  l->types = l->merge_slots + merge_capacity;
  l->blob = l->types + (n + 3) / 4;
  l->irregular = l->blob + (blob_bytes + 3) / 4;
  l->total = l->irregular + irregular_words;
  return true;
}

}  // namespace

int32_t BpeTables::Find(std::string_view bytes) const {
  const Probe p = MakeProbe(HashBytes(bytes), token_capacity_, id_bits_);
  const uint32_t id_mask = (1u << id_bits_) - 1;
  uint32_t i = p.start;
  for (uint32_t probes = 0; probes < token_capacity_; ++probes) {
    const uint32_t slot = token_slots_[i];
    if (slot == kEmpty) return -1;
    const uint32_t id = slot & id_mask;
    if ((slot >> id_bits_) == p.tag && id < static_cast<uint32_t>(n_tokens_) &&
        Bytes(static_cast<int32_t>(id)) == bytes)
      return static_cast<int32_t>(id);
    if (++i == token_capacity_) i = 0;
  }
  return -1;
}

BpeTables::Merge BpeTables::FindMerge(int32_t left, int32_t right) const {
  const Probe p = MakeProbe(PairHash(left, right), merge_capacity_, id_bits_);
  const uint32_t id_mask = (1u << id_bits_) - 1;
  uint32_t i = p.start;
  for (uint32_t probes = 0; probes < merge_capacity_; ++probes) {
    const uint32_t slot = merge_slots_[i];
    if (slot == kEmpty) return {};
    if ((slot >> id_bits_) == p.tag) {
      const uint32_t rank = slot & id_mask;
      if (rank < static_cast<uint32_t>(n_merges_) &&
          merges_[2 * rank] == static_cast<uint32_t>(left) &&
          merges_[2 * rank + 1] == static_cast<uint32_t>(right)) {
        const uint32_t id = results_[rank];
        if (id >= static_cast<uint32_t>(n_tokens_)) return {};
        return {static_cast<int32_t>(rank), static_cast<int32_t>(id)};
      }
    }
    if (++i == merge_capacity_) i = 0;
  }
  return {};
}

std::vector<std::pair<int32_t, std::string>> BpeTables::IrregularTokens() const {
  std::vector<std::pair<int32_t, std::string>> out;
  size_t at = 0;
  for (uint32_t k = 0; k < n_irregular_; ++k) {
    if (irregular_words_ - at < 2) break;
    const uint32_t id = irregular_[at], length = irregular_[at + 1];
    const size_t words = (size_t{length} + 3) / 4;
    if (id >= static_cast<uint32_t>(n_tokens_) || words > irregular_words_ - at - 2) break;
    out.emplace_back(static_cast<int32_t>(id),
                     std::string(reinterpret_cast<const char*>(irregular_ + at + 2), length));
    at += 2 + words;
  }
  return out;
}

StatusOr<std::vector<uint32_t>> BpeTables::Build(const TokenizerSpec& spec) {
  const size_t n = spec.tokens.size();
  const bool by_id = spec.merges.empty();
  const size_t m = by_id ? spec.merge_ids.size() : spec.merges.size();
  auto type_of = [&](size_t id) {
    return spec.types.empty() ? TokenType::kNormal : spec.types[id];
  };
  // The bytes of every token: added tokens as written, the others with the byte mapping undone.
  std::string blob;
  std::vector<uint32_t> offsets(n + 1, 0);
  std::vector<uint32_t> irregular;  // records: id, length, stored bytes padded to 4
  uint32_t n_irregular = 0;
  size_t n_regular = 0;
  for (size_t id = 0; id < n; ++id) {
    const std::string& stored = spec.tokens[id];
    const TokenType type = type_of(id);
    if (IsAdded(type)) {
      blob += stored;
    } else if (!byte_level::DecodeToken(stored, &blob)) {
      if (type != TokenType::kUnused) {
        return DataLossError("token ", id, " ", QuoteBytes(stored),
                             " is not written in the byte-level alphabet");
      }
      blob += stored;  // kept as stored; FullSpec restores the stored form from the record
      irregular.push_back(static_cast<uint32_t>(id));
      irregular.push_back(static_cast<uint32_t>(stored.size()));
      const size_t at = irregular.size();
      irregular.resize(at + (stored.size() + 3) / 4, 0);
      std::memcpy(irregular.data() + at, stored.data(), stored.size());
      ++n_irregular;
    }
    if (IsRegular(type)) ++n_regular;
    if (blob.size() > UINT32_MAX) return InvalidArgumentError("the vocabulary's bytes exceed 4 GB");
    offsets[id + 1] = static_cast<uint32_t>(blob.size());
  }
  const uint32_t id_bits =
      std::max<uint32_t>(1, static_cast<uint32_t>(std::bit_width(std::max(n, m))));
  if (id_bits > kMaxIdBits)
    return InvalidArgumentError("a vocabulary of ", n, " tokens and ", m, " merges is too large");
  const uint32_t token_capacity = CapacityFor(n_regular), merge_capacity = CapacityFor(m);
  Layout l;
  if (!ComputeLayout(n, m, token_capacity, merge_capacity, blob.size(), irregular.size(), &l))
    return InvalidArgumentError("the vocabulary is too large for the tokenizer tables");
  std::vector<uint32_t> w(l.total, 0);
  w[0] = kMagic;
  w[1] = kVersion;
  w[2] = static_cast<uint32_t>(n);
  w[3] = static_cast<uint32_t>(m);
  w[4] = id_bits;
  w[5] = token_capacity;
  w[6] = merge_capacity;
  w[7] = static_cast<uint32_t>(blob.size());
  w[8] = n_irregular;
  w[9] = static_cast<uint32_t>(irregular.size());
  std::copy(offsets.begin(), offsets.end(), w.begin() + static_cast<ptrdiff_t>(l.offsets));
  std::fill(w.begin() + static_cast<ptrdiff_t>(l.token_slots),
            w.begin() + static_cast<ptrdiff_t>(l.merges), kEmpty);
  std::fill(w.begin() + static_cast<ptrdiff_t>(l.merge_slots),
            w.begin() + static_cast<ptrdiff_t>(l.types), kEmpty);
  auto* types = reinterpret_cast<uint8_t*>(w.data() + l.types);
  for (size_t id = 0; id < n; ++id) types[id] = static_cast<uint8_t>(type_of(id));
  if (!blob.empty()) std::memcpy(w.data() + l.blob, blob.data(), blob.size());
  std::copy(irregular.begin(), irregular.end(), w.begin() + static_cast<ptrdiff_t>(l.irregular));
  BpeTables t = View(w);

  // The index over the regular tokens; the first id with given bytes wins.
  const uint32_t id_mask = (1u << id_bits) - 1;
  uint32_t* token_slots = w.data() + l.token_slots;
  for (size_t id = 0; id < n; ++id) {
    if (!IsRegular(type_of(id))) continue;
    const std::string_view bytes = t.Bytes(static_cast<int32_t>(id));
    const Probe p = MakeProbe(HashBytes(bytes), token_capacity, id_bits);
    for (uint32_t i = p.start;; i = i + 1 == token_capacity ? 0 : i + 1) {
      const uint32_t slot = token_slots[i];
      if (slot == kEmpty) {
        token_slots[i] = (p.tag << id_bits) | static_cast<uint32_t>(id);
        break;
      }
      if ((slot >> id_bits) == p.tag && t.Bytes(static_cast<int32_t>(slot & id_mask)) == bytes)
        break;
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const int32_t id = t.Find(std::string_view(&byte, 1));
    if (id < 0) {
      return DataLossError("the vocabulary has no token for byte ", b, " (written ",
                           QuoteBytes(byte_level::EncodeBytes(std::string_view(&byte, 1))),
                           "), so some text could not be encoded");
    }
    w[kFixedWords + static_cast<size_t>(b)] = static_cast<uint32_t>(id);
  }

  // Merges in rank order. Vocabularies usually list merged tokens in merge order (Qwen: merge r
  // makes token 256 + r), so rank + offset is tried before the index; the offset comes from the
  // first merge, and guessing stops when it does not pay off.
  uint32_t* merges = w.data() + l.merges;
  uint32_t* results = w.data() + l.results;
  uint32_t* merge_slots = w.data() + l.merge_slots;
  std::string left_bytes, right_bytes, merged_bytes;
  int64_t guess_offset = -1;
  size_t guess_hits = 0;
  auto is_regular_id = [&](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < n && IsRegular(type_of(static_cast<size_t>(id)));
  };
  // Errors name the merge as the spec gives it: by its parts' stored forms, or by their ids.
  const auto merge_error = [&](size_t rank, std::string_view problem) {
    if (!by_id) {
      return DataLossError("merge ", rank, " (", QuoteBytes(spec.merges[rank].first), " ",
                           QuoteBytes(spec.merges[rank].second), "): ", problem);
    }
    const auto part = [&](int32_t id) {
      return id >= 0 && static_cast<size_t>(id) < n
                 ? StrCat("token ", id, " ", QuoteBytes(spec.tokens[static_cast<size_t>(id)]))
                 : StrCat("token ", id, " ?");
    };
    return DataLossError("merge ", rank, " (", part(spec.merge_ids[rank].first), ", ",
                         part(spec.merge_ids[rank].second), "): ", problem);
  };
  for (size_t rank = 0; rank < m; ++rank) {
    int32_t left = -1, right = -1;
    if (by_id) {
      left = spec.merge_ids[rank].first;
      right = spec.merge_ids[rank].second;
      if (!is_regular_id(left))
        return merge_error(rank, "its left part is not a regular token of the vocabulary");
      if (!is_regular_id(right))
        return merge_error(rank, "its right part is not a regular token of the vocabulary");
    } else {
      left_bytes.clear();
      right_bytes.clear();
      if (!byte_level::DecodeToken(spec.merges[rank].first, &left_bytes))
        return merge_error(rank, "its left part is not written in the byte-level alphabet");
      if (!byte_level::DecodeToken(spec.merges[rank].second, &right_bytes))
        return merge_error(rank, "its right part is not written in the byte-level alphabet");
      left = t.Find(left_bytes);
      right = t.Find(right_bytes);
      if (left < 0) return merge_error(rank, "its left part is not in the vocabulary");
      if (right < 0) return merge_error(rank, "its right part is not in the vocabulary");
    }
    merged_bytes.assign(t.Bytes(left));
    merged_bytes.append(t.Bytes(right));
    int32_t merged = -1;
    const int64_t guess = guess_offset + static_cast<int64_t>(rank);
    if (guess_offset >= 0 && guess < static_cast<int64_t>(n) &&
        is_regular_id(static_cast<int32_t>(guess)) &&
        t.Bytes(static_cast<int32_t>(guess)) == merged_bytes) {
      merged = static_cast<int32_t>(guess);
      ++guess_hits;
    } else {
      merged = t.Find(merged_bytes);
      if (rank == 0 && merged >= 0) guess_offset = merged;
    }
    if (rank == 1024 && guess_hits * 2 < rank) guess_offset = -1;
    if (merged < 0) return merge_error(rank, "the merged token is not in the vocabulary");
    merges[2 * rank] = static_cast<uint32_t>(left);
    merges[2 * rank + 1] = static_cast<uint32_t>(right);
    results[rank] = static_cast<uint32_t>(merged);
    // A later duplicate of a pair replaces the earlier one, as in Hugging Face tokenizers.
    const Probe p = MakeProbe(PairHash(left, right), merge_capacity, id_bits);
    for (uint32_t i = p.start;; i = i + 1 == merge_capacity ? 0 : i + 1) {
      const uint32_t slot = merge_slots[i];
      const uint32_t r = slot & id_mask;
      if (slot == kEmpty ||
          ((slot >> id_bits) == p.tag && merges[2 * r] == static_cast<uint32_t>(left) &&
           merges[2 * r + 1] == static_cast<uint32_t>(right))) {
        merge_slots[i] = (p.tag << id_bits) | static_cast<uint32_t>(rank);
        break;
      }
    }
  }
  return w;
}

BpeTables BpeTables::View(std::span<const uint32_t> w) {
  BpeTables t;
  t.n_tokens_ = static_cast<int32_t>(w[2]);
  t.n_merges_ = static_cast<int32_t>(w[3]);
  t.id_bits_ = w[4];
  t.token_capacity_ = w[5];
  t.merge_capacity_ = w[6];
  t.n_irregular_ = w[8];
  t.irregular_words_ = w[9];
  t.blob_bytes_ = w[7];
  for (size_t b = 0; b < 256; ++b) t.byte_ids_[b] = static_cast<int32_t>(w[kFixedWords + b]);
  Layout l;
  ComputeLayout(w[2], w[3], w[5], w[6], w[7], w[9], &l);
  t.offsets_ = w.data() + l.offsets;
  t.token_slots_ = w.data() + l.token_slots;
  t.merges_ = w.data() + l.merges;
  t.results_ = w.data() + l.results;
  t.merge_slots_ = w.data() + l.merge_slots;
  t.types_ = reinterpret_cast<const uint8_t*>(w.data() + l.types);
  t.blob_ = reinterpret_cast<const char*>(w.data() + l.blob);
  t.irregular_ = w.data() + l.irregular;
  return t;
}

StatusOr<BpeTables> BpeTables::Parse(std::span<const uint32_t> w, const std::string& name) {
  const std::string what = name + " (tokenizer tables)";
  if (w.size() < kHeaderWords)
    return DataLossError(what, ": truncated: ", w.size() * 4, " bytes, the header needs ",
                         kHeaderWords * 4);
  if (w[0] != kMagic) return DataLossError(what, ": not a byte-level BPE table image");
  if (w[1] != kVersion)
    return UnimplementedError(what, ": table version ", w[1], " is not supported");
  const uint32_t n = w[2], m = w[3], id_bits = w[4], blob_bytes = w[7];
  if (n == 0) return DataLossError(what, ": the vocabulary is empty");
  if (id_bits < 1 || id_bits > kMaxIdBits || n > (1u << id_bits) - 1 || m > (1u << id_bits) - 1)
    return DataLossError(what, ": ", n, " tokens and ", m, " merges do not fit ", id_bits,
                         "-bit ids");
  if (w[5] == 0 || w[6] == 0) return DataLossError(what, ": an index has no slots");
  Layout l;
  if (!ComputeLayout(n, m, w[5], w[6], blob_bytes, w[9], &l))
    return DataLossError(what, ": the header's sizes are out of range");
  if (l.total != w.size()) {
    return DataLossError(what, ": the header describes ", l.total * 4, " bytes of tables, the ",
                         "section holds ", w.size() * 4);
  }
  for (size_t i = 10; i < kFixedWords; ++i) {
    if (w[i] != 0) return DataLossError(what, ": reserved header word ", i, " is not zero");
  }
  for (size_t b = 0; b < 256; ++b) {
    if (w[kFixedWords + b] >= n)
      return DataLossError(what, ": the token of byte ", b, " is ", w[kFixedWords + b],
                           ", outside the vocabulary");
  }
  BpeTables t = View(w);
  if (t.offsets_[0] != 0 || t.offsets_[n] != blob_bytes)
    return DataLossError(what, ": token offsets do not span the token bytes");
  for (uint32_t id = 0; id < n; ++id) {
    if (t.offsets_[id + 1] < t.offsets_[id])
      return DataLossError(what, ": token ", id, " has offsets [", t.offsets_[id], ", ",
                           t.offsets_[id + 1], ")");
  }
  for (uint32_t id = 0; id < n; ++id) {  // the offsets are known good now
    if (t.types_[id] < 1 || t.types_[id] > 6)
      return DataLossError(what, ": token ", id, " has type ", int{t.types_[id]});
    // Added tokens are matched in the raw text, which must split only between characters.
    if (IsAdded(t.type(static_cast<int32_t>(id)))) {
      const std::string_view text = t.Bytes(static_cast<int32_t>(id));
      if (text.empty() || FindInvalidUtf8(text) >= 0)
        return DataLossError(what, ": added token ", id, " ", QuoteBytes(text),
                             " is empty or not valid UTF-8");
    }
  }
  const uint32_t id_mask = (1u << id_bits) - 1;
  auto check_slots = [&](const uint32_t* slots, uint32_t capacity, uint32_t limit,
                         const char* index) -> Status {
    bool has_empty = false;
    for (uint32_t i = 0; i < capacity; ++i) {
      if (slots[i] == kEmpty) {
        has_empty = true;
      } else if ((slots[i] & id_mask) >= limit) {
        return DataLossError(what, ": slot ", i, " of the ", index, " index names ",
                             slots[i] & id_mask, ", beyond ", limit);
      }
    }
    if (!has_empty) return DataLossError(what, ": the ", index, " index has no empty slot");
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(check_slots(t.token_slots_, t.token_capacity_, n, "token"));
  POCKET_RETURN_IF_ERROR(check_slots(t.merge_slots_, t.merge_capacity_, m, "merge"));
  for (uint32_t r = 0; r < m; ++r) {
    if (t.merges_[2 * r] >= n || t.merges_[2 * r + 1] >= n || t.results_[r] >= n)
      return DataLossError(what, ": merge ", r, " names a token outside the vocabulary");
  }
  size_t at = 0;
  for (uint32_t k = 0; k < t.n_irregular_; ++k) {
    if (w[9] - at < 2 || t.irregular_[at] >= n ||
        (t.irregular_[at + 1] + size_t{3}) / 4 > w[9] - at - 2) {
      return DataLossError(what, ": irregular token record ", k, " is corrupt");
    }
    at += 2 + (t.irregular_[at + 1] + size_t{3}) / 4;
  }
  if (at != w[9]) return DataLossError(what, ": irregular token records do not fill their area");
  return t;
}

}  // namespace pocket
