// The attention keys and values of every past position, per layer and KV head, in the layout the
// attention kernels read (kernels/kernel_table.h, KvHeadView): K blocked by 16 positions and
// transposed inside a block, V row-major; f16 by default, f32 or int8 (one scale per position) on
// request. Sized once for the requested context; a session owns one. Copying is explicit (Clone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

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
  size_t bytes() const { return data_bytes_ + n_scales_ * sizeof(float); }

  KvHeadView head(int32_t layer, int32_t kv_head) const;

  KvCache Clone() const;

  // Copies the keys and values of blocks [first, first + n_blocks) (positions 16 first to
  // 16 (first + n_blocks)) of `from` (same model shape and type; both at least that long), block
  // by block: a cached prefix into a session, or back.
  Status CopyBlocksFrom(const KvCache& from, int32_t first, int32_t n_blocks);

  // Copies the keys and values of slots from[i] to slots to + i, in every layer and head, in
  // order (a slot listed later may be one written earlier only if it was read first: the rows of
  // an accepted draft branch moved down to follow the committed ones, from[i] >= to + i).
  void MoveSlots(std::span<const int32_t> from, int32_t to);

 private:
  KvCache() = default;
  std::unique_ptr<uint8_t[]> data_;
  std::unique_ptr<float[]> scales_;
  size_t data_bytes_ = 0;
  size_t n_scales_ = 0;
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
