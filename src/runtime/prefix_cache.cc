#include "runtime/prefix_cache.h"

#include <algorithm>

namespace pocket {

PrefixCache::Entry* PrefixCache::Match(const Model& model, const AdapterSet& adapters, KvType type,
                                       std::string_view salt, std::span<const int32_t> tokens,
                                       size_t* n) {
  Entry* best = nullptr;
  *n = 0;
  for (auto& e : entries_) {
    if (e->model.expired() || e->model.lock().get() != &model || e->type != type ||
        e->salt != salt || !SameAdapters(e->adapters, adapters)) {
      continue;
    }
    const size_t limit = std::min(e->tokens.size(), tokens.size());
    size_t common = 0;
    while (common < limit && e->tokens[common] == tokens[common]) ++common;
    if (common >= static_cast<size_t>(options_.min_match) && common > *n) {
      *n = common;
      best = e.get();
    }
  }
  return best;
}

StatusOr<int32_t> PrefixCache::Restore(const Model& model, const AdapterSet& adapters,
                                       std::span<const int32_t> tokens, size_t max_len,
                                       size_t min_len, KvCache& kv, std::string_view salt) {
  const std::lock_guard<std::mutex> lock(mu_);
  ++stats_.lookups;
  tokens = tokens.first(std::min(tokens.size(), max_len));
  size_t n = 0;
  Entry* e = Match(model, adapters, kv.type(), salt, tokens, &n);
  n = std::min(n, static_cast<size_t>(kv.n_ctx()));
  if (e == nullptr || n == 0 || n <= min_len) return 0;
  const int32_t first = static_cast<int32_t>(min_len / kKvBlockPositions);
  const int32_t stop = static_cast<int32_t>((n + kKvBlockPositions - 1) / kKvBlockPositions);
  POCKET_RETURN_IF_ERROR(kv.ShareBlocksFrom(e->kv, first, stop - first));
  e->last_used = ++clock_;
  ++stats_.hits;
  stats_.hit_tokens += static_cast<int64_t>(n - min_len);
  return static_cast<int32_t>(n);
}

Status PrefixCache::Store(const std::shared_ptr<const Model>& model, const AdapterSet& adapters,
                          std::span<const int32_t> tokens, const KvCache& kv,
                          std::string_view salt) {
  const Status s = StoreLocked(model, adapters, tokens, kv, salt);
  if (!s.ok()) {
    const std::lock_guard<std::mutex> lock(mu_);
    ++stats_.store_failures;
  }
  return s;
}

Status PrefixCache::StoreLocked(const std::shared_ptr<const Model>& model,
                                const AdapterSet& adapters, std::span<const int32_t> tokens,
                                const KvCache& kv, std::string_view salt) {
  if (model == nullptr) return InvalidArgumentError("no model");
  const size_t n = std::min(tokens.size(), static_cast<size_t>(kv.n_ctx()));
  if (n == 0 || n < static_cast<size_t>(std::max(options_.min_tokens, 1))) return Status::Ok();
  tokens = tokens.first(n);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    size_t have = 0;
    Entry* e = Match(*model, adapters, kv.type(), salt, tokens, &have);
    if (e != nullptr && have == n) {
      e->last_used = ++clock_;
      return Status::Ok();
    }
  }
  // The copy, outside the lock (the caller's cache is its own): the blocks holding [0, n), the
  // last one whole.
  const int32_t blocks = static_cast<int32_t>((n + kKvBlockPositions - 1) / kKvBlockPositions);
  POCKET_ASSIGN_OR_RETURN(
      KvCache copy, KvCache::Create(model->config(),
                                    blocks * static_cast<int32_t>(kKvBlockPositions), kv.type()));
  if (copy.context_bytes() > options_.max_bytes) return Status::Ok();
  POCKET_RETURN_IF_ERROR(copy.ShareBlocksFrom(kv, 0, blocks));
  auto entry = std::make_unique<Entry>(Entry{model, adapters, kv.type(), std::string(salt),
                                             std::vector<int32_t>(tokens.begin(), tokens.end()),
                                             std::move(copy), 0, 0});
  entry->bytes = entry->kv.bytes() + n * sizeof(int32_t);
  const std::lock_guard<std::mutex> lock(mu_);
  // Entries this one extends are no longer needed: it serves their prefixes too.
  std::erase_if(entries_, [&](const std::unique_ptr<Entry>& old) {
    if (old->model.expired()) {  // its model is gone
      stats_.bytes -= old->bytes;
      return true;
    }
    if (old->model.lock() != model || old->type != entry->type || old->salt != entry->salt ||
        !SameAdapters(old->adapters, adapters) || old->tokens.size() > n ||
        !std::equal(old->tokens.begin(), old->tokens.end(), entry->tokens.begin())) {
      return false;
    }
    stats_.bytes -= old->bytes;
    return true;
  });
  entry->last_used = ++clock_;
  stats_.bytes += entry->bytes;
  entries_.push_back(std::move(entry));
  ++stats_.stores;
  while (stats_.bytes > options_.max_bytes && entries_.size() > 1) {
    auto lru = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
      return a->last_used < b->last_used;
    });
    stats_.bytes -= (*lru)->bytes;
    entries_.erase(lru);
    ++stats_.evictions;
  }
  return Status::Ok();
}

PrefixCacheStats PrefixCache::stats() const {
  const std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s = stats_;
  s.entries = static_cast<int32_t>(entries_.size());
  return s;
}

bool PrefixCache::EvictLeastRecentlyUsed() {
  const std::lock_guard<std::mutex> lock(mu_);
  if (entries_.empty()) return false;
  auto lru = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a->last_used < b->last_used;
  });
  stats_.bytes -= (*lru)->bytes;
  entries_.erase(lru);
  ++stats_.evictions;
  return true;
}

void PrefixCache::Pages(std::vector<std::pair<const uint8_t*, size_t>>& out) const {
  const std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) e->kv.Pages(out);
}

void PrefixCache::Clear() {
  const std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  stats_.bytes = 0;
}

}  // namespace pocket
