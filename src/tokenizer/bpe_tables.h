// The lookup tables of a byte-level BPE tokenizer as one flat, position-independent image of
// 32-bit words: built in memory from a TokenizerSpec, written unchanged into a .pocket tokenizer
// section, and used in place from the mapped file. Nothing is copied at load, and only the pages
// that encoding touches become resident (docs/format.md, "tokenizer section, version 2").
//
// The image holds the token bytes (after undoing the GPT-2 byte mapping), an index bytes -> id
// over the regular tokens, the merges in rank order with their results, and an index
// (left, right) -> rank. Both indexes are open-addressing tables of 32-bit slots: the low
// `id_bits` bits hold the id (or rank), the high bits a tag from the key's hash, so a probe rarely
// reads anything but the slot; an empty slot is all ones.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

// A view of an image; valid while the image's storage lives. Parse() checks every field, id and
// offset, so the lookups below stay inside the image whatever bytes it was given.
class BpeTables {
 public:
  // Builds the image of `spec` (a byte-level BPE spec with tokens and merges, by string or id).
  // Errors name the token or merge at fault.
  static StatusOr<std::vector<uint32_t>> Build(const TokenizerSpec& spec);
  // Checks an image (`words` must stay alive and be 4-byte aligned) and returns a view of it.
  // `name` is used in messages.
  static StatusOr<BpeTables> Parse(std::span<const uint32_t> words, const std::string& name);

  int32_t n_tokens() const { return n_tokens_; }
  int32_t n_merges() const { return n_merges_; }
  TokenType type(int32_t id) const { return static_cast<TokenType>(types_[id]); }
  // The bytes of token `id` (0 <= id < n_tokens). The lookups stay in bounds even if the bytes
  // of a mapped image change after Parse (a file rewritten in place): then they return nothing.
  std::string_view Bytes(int32_t id) const {
    const uint32_t begin = offsets_[id], end = offsets_[id + 1];
    if (end < begin || end > blob_bytes_) return {};
    return {blob_ + begin, static_cast<size_t>(end - begin)};
  }
  // The regular token (not added, not unused) with these bytes, or -1.
  int32_t Find(std::string_view bytes) const;
  // The token of a single byte (every byte has one).
  int32_t ByteId(uint8_t b) const { return byte_ids_[b]; }
  struct Merge {
    int32_t rank = -1;  // -1: the pair does not merge
    int32_t id = -1;    // the merged token
  };
  Merge FindMerge(int32_t left, int32_t right) const;
  // The parts of merge `rank`, in rank order.
  std::pair<int32_t, int32_t> MergeParts(int32_t rank) const {
    return {static_cast<int32_t>(merges_[2 * rank]), static_cast<int32_t>(merges_[2 * rank + 1])};
  }
  // Tokens whose stored form is not the byte-level form of their bytes (unused tokens outside the
  // byte-level alphabet), with their stored form.
  std::vector<std::pair<int32_t, std::string>> IrregularTokens() const;

 private:
  // A view without checks (of an image Build made, or one Parse has checked).
  static BpeTables View(std::span<const uint32_t> words);

  int32_t n_tokens_ = 0;
  int32_t n_merges_ = 0;
  uint32_t id_bits_ = 0;
  uint32_t token_capacity_ = 0;
  uint32_t merge_capacity_ = 0;
  uint32_t n_irregular_ = 0;
  uint32_t irregular_words_ = 0;
  uint32_t blob_bytes_ = 0;
  std::array<int32_t, 256> byte_ids_{};
  const uint32_t* offsets_ = nullptr;      // n_tokens + 1, into blob_
  const uint32_t* token_slots_ = nullptr;  // token_capacity
  const uint32_t* merges_ = nullptr;       // 2 * n_merges: left, right
  const uint32_t* results_ = nullptr;      // n_merges
  const uint32_t* merge_slots_ = nullptr;  // merge_capacity
  const uint8_t* types_ = nullptr;         // n_tokens
  const char* blob_ = nullptr;
  const uint32_t* irregular_ = nullptr;  // records: id, length, bytes padded to 4
};

}  // namespace pocket
