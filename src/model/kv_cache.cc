#include "model/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "base/memory.h"

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

KvCache::Page KvCache::NewPage() const {
  // From the OS, so that freeing pages shrinks the resident set (base/memory.h). A page's bytes are
  // written before they are read (masked past the end), whatever they hold.
  return AllocateOsPages(page_bytes_);
}

void KvCache::CountReserve(int32_t begin, int32_t end, size_t* missing, size_t* copies) const {
  const size_t n =
      std::min((static_cast<size_t>(std::max(end, 0)) + kKvPagePositions - 1) / kKvPagePositions,
               pages_.size());
  const size_t first_written =
      begin < end ? static_cast<size_t>(std::max(begin, 0)) / kKvPagePositions : n;
  *missing = 0;
  *copies = 0;
  for (size_t b = 0; b < n; ++b) {
    if (!pages_[b]) {
      ++*missing;
    } else if (b >= first_written && pages_[b].use_count() > 1) {
      ++*copies;
    }
  }
}

Status KvCache::Reserve(int32_t begin, int32_t end) {
  if (end > n_ctx_) {
    return OutOfRangeError("positions up to ", end, " do not fit the context of ", n_ctx_);
  }
  size_t missing = 0, copies = 0;
  CountReserve(begin, end, &missing, &copies);
  // A page seen with one reference is written in place. Formally the relaxed use_count() does not
  // order another thread's reads before its reference was dropped (release) with these writes; an
  // acquire fence would, but GCC's ThreadSanitizer rejects fences (-Werror=tsan), and the
  // TSan-built tests share pages across threads without a report.
  if (missing + copies == 0) return Status::Ok();
  // Allocate what is needed first, so a failure leaves the pages in use as they were.
  while (free_.size() < missing + copies) {
    Page page = NewPage();
    if (!page) {
      return ResourceExhaustedError("cannot allocate a KV page of ", HumanBytes(page_bytes_), " (",
                                    n_used_, " pages held, ", HumanBytes(bytes()),
                                    ") for positions up to ", end);
    }
    free_.push_back(std::move(page));
  }
  const size_t n =
      (static_cast<size_t>(std::max(end, 0)) + kKvPagePositions - 1) / kKvPagePositions;
  const size_t first_written =
      begin < end ? static_cast<size_t>(std::max(begin, 0)) / kKvPagePositions : n;
  for (size_t b = 0; b < n; ++b) {
    const bool copy = pages_[b] && b >= first_written && pages_[b].use_count() > 1;
    if (pages_[b] && !copy) continue;
    Page page = std::move(free_.back());
    free_.pop_back();
    if (copy) {
      // Copy on write: the shared page stays as it is for the caches that hold it.
      std::memcpy(page.get(), pages_[b].get(), page_bytes_);
    } else {
      ++n_used_;
    }
    pages_[b] = std::move(page);
    table_[b] = pages_[b].get();
  }
  return Status::Ok();
}

size_t KvCache::ReserveBytes(int32_t begin, int32_t end) const {
  size_t missing = 0, copies = 0;
  CountReserve(begin, end, &missing, &copies);
  return (missing + copies - std::min(missing + copies, free_.size())) * page_bytes_;
}

size_t KvCache::private_bytes() const {
  size_t n = free_.size();
  for (const Page& p : pages_) n += p && p.use_count() == 1 ? 1 : 0;
  return n * page_bytes_;
}

void KvCache::SharedPages(std::vector<std::pair<const uint8_t*, size_t>>& out) const {
  for (const Page& p : pages_) {
    if (p && p.use_count() > 1) out.emplace_back(p.get(), page_bytes_);
  }
}

void KvCache::Pages(std::vector<std::pair<const uint8_t*, size_t>>& out) const {
  for (const Page& p : pages_) {
    if (p) out.emplace_back(p.get(), page_bytes_);
  }
}

void KvCache::Shrink(int32_t end) {
  const size_t keep =
      (static_cast<size_t>(std::max(end, 0)) + kKvPagePositions - 1) / kKvPagePositions;
  for (size_t b = keep; b < pages_.size(); ++b) {
    if (!pages_[b]) continue;
    if (pages_[b].use_count() == 1) {
      free_.push_back(std::move(pages_[b]));
    } else {
      pages_[b].reset();  // shared: another cache's, never reused for writing here
    }
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
    kv.pages_[b] = AllocateOsPages(page_bytes_);
    if (!kv.pages_[b]) throw std::bad_alloc();  // as the copy of a vector would
    std::memcpy(kv.pages_[b].get(), pages_[b].get(), page_bytes_);
    kv.table_[b] = kv.pages_[b].get();
    ++kv.n_used_;
  }
  return kv;
}

Status KvCache::CheckSameShape(const KvCache& from, int32_t first, int32_t n_blocks) const {
  if (from.type_ != type_ || from.n_layers_ != n_layers_ || from.n_kv_heads_ != n_kv_heads_ ||
      from.head_dim_ != head_dim_) {
    return InvalidArgumentError("KV caches of different shapes or types");
  }
  if (first < 0 || n_blocks < 0 ||
      (first + n_blocks) * kKvBlockPositions > std::min(from.n_ctx_padded_, n_ctx_padded_)) {
    return OutOfRangeError("KV blocks ", first, " to ", first + n_blocks - 1,
                           " do not fit caches of ", from.n_ctx_, " and ", n_ctx_, " positions");
  }
  for (int32_t b = first; b < first + n_blocks; ++b) {
    if (from.table_[static_cast<size_t>(b / kKvPageBlocks)] == nullptr) {
      return FailedPreconditionError("KV block ", b, " of the source is not held");
    }
  }
  return Status::Ok();
}

Status KvCache::ShareBlocksFrom(const KvCache& from, int32_t first, int32_t n_blocks) {
  POCKET_RETURN_IF_ERROR(CheckSameShape(from, first, n_blocks));
  const int32_t stop = first + n_blocks;
  int32_t b = first;
  while (b < stop) {
    const int32_t page_first = b / kKvPageBlocks * kKvPageBlocks;
    const int32_t page_stop = page_first + kKvPageBlocks;
    if (b == page_first && page_stop <= stop) {
      // A whole page: mapped (the one held here, if any, is dropped).
      const size_t p = static_cast<size_t>(b / kKvPageBlocks);
      if (pages_[p] != from.pages_[p]) {
        if (!pages_[p]) ++n_used_;
        pages_[p] = from.pages_[p];
        table_[p] = pages_[p].get();
      }
      b = page_stop;
    } else {
      const int32_t e = std::min(stop, page_stop);
      POCKET_RETURN_IF_ERROR(CopyBlocksFrom(from, b, e - b));
      b = e;
    }
  }
  return Status::Ok();
}

Status KvCache::CopyBlocksFrom(const KvCache& from, int32_t first, int32_t n_blocks) {
  POCKET_RETURN_IF_ERROR(CheckSameShape(from, first, n_blocks));
  const int32_t end =
      std::min((first + n_blocks) * static_cast<int32_t>(kKvBlockPositions), n_ctx_);
  POCKET_RETURN_IF_ERROR(Reserve(first * static_cast<int32_t>(kKvBlockPositions), end));
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
