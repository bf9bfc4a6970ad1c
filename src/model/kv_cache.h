// The attention keys and values of every past position, per layer and KV head, in the layout the
// attention kernels read (kernels/kernel_table.h, KvHeadView): K blocked by 16 positions and
// transposed inside a block, V row-major; f16 by default, f32 or int8 (one scale per position) on
// request. Paged: a page holds kKvPagePositions (64) positions of every layer and head, allocated
// when a pass first writes there (Reserve, called by Forward), so memory follows the positions
// held, not the context size; pages cut off (Shrink) are kept for reuse until Trim frees them. A
// session owns one. Copying is explicit (Clone).
//
// Pages are reference counted: ShareBlocksFrom maps another cache's whole pages instead of copying
// them (the prefix cache and the sessions that restore a prefix hold the same pages). A shared page
// is never written: Reserve gives the pages a pass writes a private copy first (copy on write),
// and Shrink drops a shared page instead of keeping it for reuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/kernel_table.h"
#include "model/config.h"

namespace pocket {

class KvCache {
 public:
  static StatusOr<KvCache> Create(const ModelConfig& config, int32_t n_ctx,
                                  KvType type = KvType::kF16);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  int32_t n_ctx() const { return n_ctx_; }
  KvType type() const { return type_; }
  // Bytes held: pages in use (shared ones too) and kept for reuse.
  size_t bytes() const { return (n_used_ + free_.size()) * page_bytes_; }
  // Bytes held by this cache alone: pages no other cache shares, and the kept ones.
  size_t private_bytes() const;
  // Appends the pages this cache shares with another, with their size (to count them once across
  // caches).
  void SharedPages(std::vector<std::pair<const uint8_t*, size_t>>& out) const;
  // Appends every page in use, with its size.
  void Pages(std::vector<std::pair<const uint8_t*, size_t>>& out) const;
  // Bytes of the pages in use (positions held, in whole blocks).
  size_t used_bytes() const { return n_used_ * page_bytes_; }
  // Bytes of one page (kKvPagePositions positions of every layer and head).
  size_t page_bytes() const { return page_bytes_; }
  // Bytes the whole context would hold.
  size_t context_bytes() const { return pages_.size() * page_bytes_; }

  // Pages for positions [0, end) (end <= n_ctx), those of [begin, end) (the positions a pass
  // writes) private: missing pages from the kept ones first, else allocated, and a shared page
  // there copied (ResourceExhausted naming the sizes when allocating fails; the cache is
  // unchanged then).
  Status Reserve(int32_t begin, int32_t end);
  // The bytes Reserve(begin, end) would allocate (pages not held and shared pages copied, less the
  // kept ones it reuses).
  size_t ReserveBytes(int32_t begin, int32_t end) const;
  // Gives up the pages past the block of position end - 1 (kept for reuse).
  void Shrink(int32_t end);
  // Frees the kept pages.
  void Trim();

  KvHeadView head(int32_t layer, int32_t kv_head) const;

  KvCache Clone() const;

  // Copies the keys and values of blocks [first, first + n_blocks) (positions 16 first to
  // 16 (first + n_blocks)) of `from` (same model shape and type; both at least that long), block
  // by block: a cached prefix into a session, or back.
  Status CopyBlocksFrom(const KvCache& from, int32_t first, int32_t n_blocks);
  // The same, but the pages the blocks fill whole are shared (mapped, reference counted), not
  // copied; only the blocks of a partly covered page are copied.
  Status ShareBlocksFrom(const KvCache& from, int32_t first, int32_t n_blocks);

  // Copies the keys and values of slots from[i] to slots to + i, in every layer and head, in
  // order (a slot listed later may be one written earlier only if it was read first: the rows of
  // an accepted draft branch moved down to follow the committed ones, from[i] >= to + i).
  void MoveSlots(std::span<const int32_t> from, int32_t to);

 private:
  using Page = std::shared_ptr<uint8_t[]>;
  KvCache() = default;
  Status CheckSameShape(const KvCache& from, int32_t first, int32_t n_blocks) const;
  Page NewPage() const;  // null when allocating fails
  // Pages for [0, end) and the missing and shared ones among them counted (Reserve's plan).
  void CountReserve(int32_t begin, int32_t end, size_t* missing, size_t* copies) const;
  // pages_[p]: page p (positions 64 p to 64 p + 63; null: not held); table_ mirrors it as the
  // views' page table. A page whose use_count() is above one is shared, read only.
  std::vector<Page> pages_;
  std::vector<uint8_t*> table_;
  std::vector<Page> free_;  // pages kept for reuse (never shared)
  size_t n_used_ = 0;
  size_t page_bytes_ = 0;
  KvType type_ = KvType::kF16;
  int32_t n_ctx_ = 0;
  int32_t n_ctx_padded_ = 0;  // a multiple of 16 (K blocks)
  int32_t n_layers_ = 0;
  int32_t n_kv_heads_ = 0;
  int32_t head_dim_ = 0;
};

// Copies position from_pos of one KV head view (keys, values, kQ8 scales) to position to_pos of
// another of the same type and head size.
void CopyKvPosition(const KvHeadView& from, int64_t from_pos, const KvHeadView& to, int64_t to_pos);

}  // namespace pocket
