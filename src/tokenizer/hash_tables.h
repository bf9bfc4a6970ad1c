// Two small open-addressing hash tables for the tokenizer's hot paths (std::unordered_map is
// several times slower to build and to probe at 150K entries). Both are built once and then only
// read, so a built table is safe to share between threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace pocket {

inline uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

inline uint64_t HashU64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// id -> bytes, plus an index bytes -> id over the ids added with Index(). A slot keeps the first 8
// bytes and the length of its key, so most probes (tokens are short) never touch the strings.
class StringTable {
 public:
  // Appends a string; its id is the number of strings before it.
  int32_t Add(std::string_view s) {
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
    bytes_.append(s);
    return static_cast<int32_t>(offsets_.size()) - 1;
  }
  int32_t size() const { return static_cast<int32_t>(offsets_.size()); }
  std::string_view Get(int32_t id) const {
    const uint32_t begin = offsets_[id];
    const uint32_t end = id + 1 < size() ? offsets_[id + 1] : static_cast<uint32_t>(bytes_.size());
    return std::string_view(bytes_).substr(begin, end - begin);
  }
  // Prepares the index for `expected` entries (call once, after the Adds).
  void ReserveIndex(size_t expected) {
    size_t capacity = 16;
    while (capacity * 5 < expected * 8) capacity *= 2;  // load factor <= 0.625
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }
  // Makes `id` findable by its bytes. The first id indexed for given bytes wins. The index must
  // have room (ReserveIndex).
  void Index(int32_t id) {
    const std::string_view s = Get(id);
    size_t i;
    const Slot probe = MakeSlot(s, id, &i);
    for (;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = probe;
        return;
      }
      if (Matches(slot, probe, s)) return;
    }
  }
  // Ids of many keys (or -1 each). Faster than one Find at a time on a large table: all slots are
  // prefetched before the first is probed.
  void FindMany(const std::string_view* keys, size_t count, int32_t* ids) const {
    if (slots_.empty()) {
      for (size_t k = 0; k < count; ++k) ids[k] = -1;
      return;
    }
    constexpr size_t kBatch = 32;
    Slot probes[kBatch];
    size_t starts[kBatch];
    for (size_t base = 0; base < count; base += kBatch) {
      const size_t n = count - base < kBatch ? count - base : kBatch;
      for (size_t k = 0; k < n; ++k) {
        probes[k] = MakeSlot(keys[base + k], -1, &starts[k]);
        __builtin_prefetch(&slots_[starts[k]]);
      }
      for (size_t k = 0; k < n; ++k) ids[base + k] = Probe(keys[base + k], probes[k], starts[k]);
    }
  }
  // Id of `s`, or -1.
  int32_t Find(std::string_view s) const {
    if (slots_.empty()) return -1;
    size_t i;
    const Slot probe = MakeSlot(s, -1, &i);
    return Probe(s, probe, i);
  }

 private:
  struct Slot {
    uint64_t prefix = 0;  // the first 8 bytes, zero-padded
    uint32_t tag = 0;     // hash bits; the low byte holds min(length, 255)
    int32_t id = -1;
  };
  Slot MakeSlot(std::string_view s, int32_t id, size_t* index) const {
    Slot slot;
    std::memcpy(&slot.prefix, s.data(), s.size() < 8 ? s.size() : 8);
    const uint64_t h = HashBytes(s);
    const uint32_t length = s.size() < 255 ? static_cast<uint32_t>(s.size()) : 255;
    // The low hash bits pick the slot; the high ones (and the length) form the tag.
    slot.tag = (static_cast<uint32_t>(h >> 32) & ~0xFFu) | length;
    slot.id = id;
    *index = h & mask_;
    return slot;
  }
  int32_t Probe(std::string_view s, const Slot& probe, size_t i) const {
    for (;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (Matches(slot, probe, s)) return slot.id;
    }
  }
  bool Matches(const Slot& slot, const Slot& probe, std::string_view s) const {
    if (slot.tag != probe.tag || slot.prefix != probe.prefix) return false;
    return s.size() <= 8 || Get(slot.id) == s;  // short keys are fully in the slot
  }
  std::string bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// (left id, right id) -> (merge rank, merged id), for byte-level BPE merges.
class PairTable {
 public:
  struct Value {
    int32_t rank;
    int32_t id;
  };
  PairTable() { Reserve(0); }
  void Reserve(size_t expected) {
    size_t capacity = 16;
    while (capacity * 5 < expected * 8) capacity *= 2;  // load factor <= 0.625
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    size_ = 0;
  }
  // Inserts or overwrites (a later duplicate pair replaces an earlier one, as in HF tokenizers).
  void Set(int32_t left, int32_t right, Value value) {
    const uint64_t key = Key(left, right);
    for (size_t i = HashU64(key) & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.key == kEmpty || slot.key == key) {
        if (slot.key == kEmpty) ++size_;
        slot = {key, value};
        return;
      }
    }
  }
  // Hints that Set or Find for this pair follows soon.
  void Prefetch(int32_t left, int32_t right) const {
    __builtin_prefetch(&slots_[HashU64(Key(left, right)) & mask_]);
  }
  const Value* Find(int32_t left, int32_t right) const {
    const uint64_t key = Key(left, right);
    for (size_t i = HashU64(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.value;
      if (slot.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;  // never a key: ids are non-negative int32
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  struct Slot {
    uint64_t key = kEmpty;
    Value value{};
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pocket
