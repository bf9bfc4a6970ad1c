// The prefix cache: keys and values of contexts (a system prompt, few-shot examples, a shared
// document, a conversation with its replies), kept after the session that computed them moves on
// or ends, so that another session whose prompt starts with the same tokens (with the same adapter
// set, KV type and salt, on the same model) copies them instead of evaluating them again. An entry
// is a finished request's whole context: its prompt and the tokens generated after it (all but the
// last, which was sampled and never evaluated), so the next turn of a conversation evaluates only
// what is new. Entries are found by their tokens, to the token (an entry also serves any prefix of
// itself), and evicted least recently used beyond a byte budget. Shared by the sessions of a model
// (SessionOptions::prefix_cache; the engine's sessions use theirs); thread-safe.
//
// The salt (pocket serve: a request's cache_salt) separates tenants: an entry serves only lookups
// with its own salt, so the count of cached tokens never tells one tenant what another's prompt
// started with.
//
// An entry holds the KV pages it fills whole by reference (KvCache::ShareBlocksFrom), not a copy:
// the session that stored it, the entry and every session that restores it hold the same pages,
// and a session copies a page only when it writes into it (after rewinding into its prefix, or
// appending after a prefix that ends inside a page). Only the blocks of a partly filled last page
// are copied. A restore that ends inside a block takes the whole block: its positions past the
// prefix are the entry's, never read (attention reads the positions before its own) and
// overwritten by the session's next tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pocket {

struct PrefixCacheOptions {
  size_t max_bytes = size_t{256} << 20;  // the entries' KV bytes at most (LRU eviction beyond)
  int32_t min_tokens = 32;               // shorter contexts are not stored
  // Shorter matches are not restored: a few tokens cost less to evaluate than to map (and a
  // prompt that shares only its template's first tokens with an entry gets nothing).
  int32_t min_match = 16;
};

struct PrefixCacheStats {
  int64_t lookups = 0;
  int64_t hits = 0;
  int64_t hit_tokens = 0;  // positions restored from the cache, all lookups together
  int64_t stores = 0;
  int64_t store_failures = 0;
  int64_t evictions = 0;
  int32_t entries = 0;
  size_t bytes = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(const PrefixCacheOptions& options = {}) : options_(options) {}

  // Finds the longest cached prefix of tokens[0, max_len) computed on `model` with `adapters` (and
  // kv's type) under `salt`, n positions; when n > min_len (the positions the caller holds
  // already: their blocks, but for the one min_len is in, are not copied again), maps the blocks
  // holding positions [min_len, n) into kv (whole pages shared, the blocks of a partial page
  // copied) and returns n; else 0. Runs under the cache's lock.
  StatusOr<int32_t> Restore(const Model& model, const AdapterSet& adapters,
                            std::span<const int32_t> tokens, size_t max_len, size_t min_len,
                            KvCache& kv, std::string_view salt = {});
  // Stores positions [0, n) of kv for tokens[0, n), n = tokens.size() (at most the context),
  // unless an entry already holds that prefix (then it is only marked used). Prefixes shorter
  // than min_tokens, or larger than the budget, are not stored. The entry shares kv's whole pages
  // (a partial last page is copied, allocated here); Generate and the engine store a request's
  // whole context after its output.
  // A store that fails (memory) is counted in stats().store_failures and returned.
  Status Store(const std::shared_ptr<const Model>& model, const AdapterSet& adapters,
               std::span<const int32_t> tokens, const KvCache& kv, std::string_view salt = {});

  PrefixCacheStats stats() const;
  // Drops the least recently used entry (counted in stats().evictions); false when there is none.
  // The engine does so before saving active sessions when its KV budget is full.
  bool EvictLeastRecentlyUsed();
  // Appends the KV pages of every entry, with their sizes (the engine counts them, once, in its
  // KV budget: a page an entry shares with sessions is one page of memory).
  void Pages(std::vector<std::pair<const uint8_t*, size_t>>& out) const;
  void Clear();

 private:
  struct Entry {
    // Weak: the cache does not keep a model alive; entries of a model that is gone never match
    // (not even a new model at the same address) and are dropped at the next store.
    std::weak_ptr<const Model> model;
    AdapterSet adapters;
    KvType type = KvType::kF16;
    std::string salt;
    std::vector<int32_t> tokens;
    KvCache kv;
    size_t bytes = 0;
    uint64_t last_used = 0;
  };
  // The longest match among the entries of this model, set, type and salt.
  Entry* Match(const Model& model, const AdapterSet& adapters, KvType type, std::string_view salt,
               std::span<const int32_t> tokens, size_t* n);
  Status StoreLocked(const std::shared_ptr<const Model>& model, const AdapterSet& adapters,
                     std::span<const int32_t> tokens, const KvCache& kv, std::string_view salt);

  PrefixCacheOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace pocket
