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
  kv.data_bytes_ = heads * 2 * static_cast<size_t>(kv.n_ctx_padded_) *
                   static_cast<size_t>(config.head_dim) * KvElementBytes(type);
  // Not zero-filled: pages are touched only as positions are written.
  kv.data_.reset(new (std::nothrow) uint8_t[kv.data_bytes_]);
  if (type == KvType::kQ8) {
    kv.n_scales_ = heads * 2 * static_cast<size_t>(kv.n_ctx_padded_);
    kv.scales_.reset(new (std::nothrow) float[kv.n_scales_]);
  }
  if (!kv.data_ || (type == KvType::kQ8 && !kv.scales_)) {
    return ResourceExhaustedError("cannot allocate the KV cache: ", HumanBytes(kv.bytes()),
                                  " for a context of ", n_ctx);
  }
  return kv;
}

KvHeadView KvCache::head(int32_t layer, int32_t kv_head) const {
  const size_t index =
      static_cast<size_t>(layer) * static_cast<size_t>(n_kv_heads_) + static_cast<size_t>(kv_head);
  const size_t plane = static_cast<size_t>(n_ctx_padded_) * static_cast<size_t>(head_dim_);
  const size_t elem = KvElementBytes(type_);
  KvHeadView v;
  v.type = type_;
  v.head_dim = head_dim_;
  v.k = data_.get() + (index * 2) * plane * elem;
  v.v = data_.get() + (index * 2 + 1) * plane * elem;
  if (type_ == KvType::kQ8) {
    v.k_scale = scales_.get() + (index * 2) * static_cast<size_t>(n_ctx_padded_);
    v.v_scale = scales_.get() + (index * 2 + 1) * static_cast<size_t>(n_ctx_padded_);
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
  kv.data_bytes_ = data_bytes_;
  kv.n_scales_ = n_scales_;
  kv.data_.reset(new uint8_t[data_bytes_]);
  std::memcpy(kv.data_.get(), data_.get(), data_bytes_);
  if (n_scales_ > 0) {
    kv.scales_.reset(new float[n_scales_]);
    std::memcpy(kv.scales_.get(), scales_.get(), n_scales_ * sizeof(float));
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
