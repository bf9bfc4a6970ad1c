#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace pocket {

StatusOr<KvCache> KvCache::Create(const ModelConfig& config, int32_t n_ctx, KvType type) {
  if (n_ctx <= 0) return InvalidArgumentError("context size must be positive, got ", n_ctx);
  KvCache kv;
  kv.type_ = type;
  kv.n_ctx_ = n_ctx;
  kv.n_ctx_padded_ = (n_ctx + 15) / 16 * 16;
  kv.n_layers_ = config.n_layers;
  kv.n_kv_heads_ = config.n_kv_heads;
  kv.head_dim_ = config.head_dim;
  const size_t heads =
      static_cast<size_t>(config.n_layers) * static_cast<size_t>(config.n_kv_heads);
  kv.page_bytes_ = heads * 2 *
                   (static_cast<size_t>(kKvPagePositions) * static_cast<size_t>(config.head_dim) *
                        KvElementBytes(type) +
                    (type == KvType::kQ8 ? kKvPagePositions * sizeof(float) : 0));
  const size_t n_pages =
      (static_cast<size_t>(kv.n_ctx_padded_) + kKvPagePositions - 1) / kKvPagePositions;
  kv.pages_.resize(n_pages);
  kv.table_.assign(n_pages, nullptr);
  kv.free_.reserve(n_pages);  // Shrink never allocates
  return kv;
}

Status KvCache::Reserve(int32_t end) {
  if (end > n_ctx_) {
    return OutOfRangeError("positions up to ", end, " do not fit the context of ", n_ctx_);
  }
  const size_t n =
      (static_cast<size_t>(std::max(end, 0)) + kKvPagePositions - 1) / kKvPagePositions;
  for (size_t b = 0; b < n; ++b) {
    if (pages_[b]) continue;
    if (free_.empty() && b + 1 < n) {
      // Allocate what is missing first, so a failure leaves the cache as it was.
      size_t missing = 0;
      for (size_t k = b; k < n; ++k) missing += pages_[k] ? 0 : 1;
      while (free_.size() < missing) {
        std::unique_ptr<uint8_t[]> page(new (std::nothrow) uint8_t[page_bytes_]);
        if (!page) {
          return ResourceExhaustedError("cannot allocate a KV page of ", HumanBytes(page_bytes_),
                                        " (", n_used_, " pages held, ", HumanBytes(bytes()),
                                        ") for positions up to ", end);
        }
        free_.push_back(std::move(page));
      }
    }
    if (!free_.empty()) {
      pages_[b] = std::move(free_.back());
      free_.pop_back();
    } else {
      // Not zero-filled: a page's bytes are written before they are read (masked past the end).
      pages_[b].reset(new (std::nothrow) uint8_t[page_bytes_]);
      if (!pages_[b]) {
        return ResourceExhaustedError("cannot allocate a KV page of ", HumanBytes(page_bytes_),
                                      " (", n_used_, " pages held, ", HumanBytes(bytes()),
                                      ") for positions up to ", end);
      }
    }
    table_[b] = pages_[b].get();
    ++n_used_;
  }
  return Status::Ok();
}

size_t KvCache::ReserveBytes(int32_t end) const {
  const size_t n =
      std::min((static_cast<size_t>(std::max(end, 0)) + kKvPagePositions - 1) / kKvPagePositions,
               pages_.size());
  size_t missing = 0;
  for (size_t b = 0; b < n; ++b) missing += pages_[b] ? 0 : 1;
  return (missing - std::min(missing, free_.size())) * page_bytes_;
}

void KvCache::Shrink(int32_t end) {
  const size_t keep =
      (static_cast<size_t>(std::max(end, 0)) + kKvPagePositions - 1) / kKvPagePositions;
  for (size_t b = keep; b < pages_.size(); ++b) {
    if (!pages_[b]) continue;
    free_.push_back(std::move(pages_[b]));
    table_[b] = nullptr;
    --n_used_;
  }
}

void KvCache::Trim() {
  free_.clear();
}

KvHeadView KvCache::head(int32_t layer, int32_t kv_head) const {
  const int64_t index = static_cast<int64_t>(layer) * n_kv_heads_ + kv_head;
  const int64_t heads = static_cast<int64_t>(n_layers_) * n_kv_heads_;
  KvHeadView v;
  v.type = type_;
  v.head_dim = head_dim_;
  // A page: for every head, its K blocks then its V rows; then (kQ8) every head's K and V scales.
  const int64_t run = v.BlockBytes() * kKvPageBlocks;
  v.pages = table_.data();
  v.page_k = index * 2 * run;
  v.page_v = (index * 2 + 1) * run;
  if (type_ == KvType::kQ8) {
    const int64_t scales = heads * 2 * run;
    v.page_ks = scales + index * 2 * kKvPagePositions * static_cast<int64_t>(sizeof(float));
    v.page_vs = v.page_ks + kKvPagePositions * static_cast<int64_t>(sizeof(float));
  }
  return v;
}

KvCache KvCache::Clone() const {
  KvCache kv;
  kv.type_ = type_;
  kv.n_ctx_ = n_ctx_;
  kv.n_ctx_padded_ = n_ctx_padded_;
  kv.n_layers_ = n_layers_;
  kv.n_kv_heads_ = n_kv_heads_;
  kv.head_dim_ = head_dim_;
  kv.page_bytes_ = page_bytes_;
  kv.pages_.resize(pages_.size());
  kv.table_.assign(pages_.size(), nullptr);
  for (size_t b = 0; b < pages_.size(); ++b) {
    if (!pages_[b]) continue;
    kv.pages_[b].reset(new uint8_t[page_bytes_]);
    std::memcpy(kv.pages_[b].get(), pages_[b].get(), page_bytes_);
    kv.table_[b] = kv.pages_[b].get();
    ++kv.n_used_;
  }
  return kv;
}

Status KvCache::CopyBlocksFrom(const KvCache& from, int32_t first, int32_t n_blocks) {
  if (from.type_ != type_ || from.n_layers_ != n_layers_ || from.n_kv_heads_ != n_kv_heads_ ||
      from.head_dim_ != head_dim_) {
    return InvalidArgumentError("KV caches of different shapes or types");
  }
  if (first < 0 || n_blocks < 0 ||
      (first + n_blocks) * kKvBlockPositions > std::min(from.n_ctx_padded_, n_ctx_padded_)) {
    return OutOfRangeError("KV blocks ", first, " to ", first + n_blocks - 1,
                           " do not fit caches of ", from.n_ctx_, " and ", n_ctx_, " positions");
  }
  const int32_t end =
      std::min((first + n_blocks) * static_cast<int32_t>(kKvBlockPositions), n_ctx_);
  for (int32_t b = first; b < first + n_blocks; ++b) {
    if (from.table_[static_cast<size_t>(b / kKvPageBlocks)] == nullptr) {
      return FailedPreconditionError("KV block ", b, " of the source is not held");
    }
  }
  POCKET_RETURN_IF_ERROR(Reserve(end));
  for (int32_t layer = 0; layer < n_layers_; ++layer) {
    for (int32_t g = 0; g < n_kv_heads_; ++g) {
      const KvHeadView src = from.head(layer, g), dst = head(layer, g);
      const size_t block_bytes = static_cast<size_t>(src.BlockBytes());
      for (int64_t b = first; b < first + n_blocks; ++b) {
        std::memcpy(dst.KeyBlock<uint8_t>(b), src.KeyBlock<const uint8_t>(b), block_bytes);
        std::memcpy(dst.ValueRow<uint8_t>(b * kKvBlockPositions),
                    src.ValueRow<const uint8_t>(b * kKvBlockPositions), block_bytes);
        if (type_ == KvType::kQ8) {
          std::memcpy(dst.KeyScales(b), src.KeyScales(b), kKvBlockPositions * sizeof(float));
          std::memcpy(dst.ValueScales(b), src.ValueScales(b), kKvBlockPositions * sizeof(float));
        }
      }
    }
  }
  return Status::Ok();
}

void KvCache::MoveSlots(std::span<const int32_t> from, int32_t to) {
  for (int32_t layer = 0; layer < n_layers_; ++layer) {
    for (int32_t g = 0; g < n_kv_heads_; ++g) {
      const KvHeadView view = head(layer, g);
      for (size_t i = 0; i < from.size(); ++i) {
        if (from[i] != to + static_cast<int32_t>(i))
          CopyKvPosition(view, from[i], view, to + static_cast<int64_t>(i));
      }
    }
  }
}

void CopyKvPosition(const KvHeadView& from, int64_t from_pos, const KvHeadView& to,
                    int64_t to_pos) {
  const int64_t eb = from.ElementBytes();
  const int64_t fb = from_pos / kKvBlockPositions, fl = from_pos % kKvBlockPositions;
  const int64_t tb = to_pos / kKvBlockPositions, tl = to_pos % kKvBlockPositions;
  for (int32_t d = 0; d < from.head_dim; ++d) {
    std::memcpy(to.KeyRow<uint8_t>(tb, d) + tl * eb, from.KeyRow<const uint8_t>(fb, d) + fl * eb,
                static_cast<size_t>(eb));
  }
  std::memmove(to.ValueRow<uint8_t>(to_pos), from.ValueRow<const uint8_t>(from_pos),
               static_cast<size_t>(from.head_dim * eb));
  if (from.type == KvType::kQ8) {
    *to.KeyScale(to_pos) = *from.KeyScale(from_pos);
    *to.ValueScale(to_pos) = *from.ValueScale(from_pos);
  }
}

}  // namespace pocket
