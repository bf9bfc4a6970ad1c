// The attention keys and values of every past position, per layer and KV head:
// [n_layers][k|v][n_kv_heads][n_ctx][head_dim]. Sized once for the requested context; a session
// owns one. Copying is explicit (Clone) because it is large.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "model/config.h"

namespace pocket {

class KvCache {
 public:
  static StatusOr<KvCache> Create(const ModelConfig& config, int32_t n_ctx);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  int32_t n_ctx() const { return n_ctx_; }
  int32_t head_dim() const { return head_dim_; }
  size_t bytes() const { return n_floats_ * sizeof(float); }

  // [n_ctx, head_dim] rows of one layer's KV head.
  float* k(int32_t layer, int32_t kv_head) { return base(layer, 0, kv_head); }
  float* v(int32_t layer, int32_t kv_head) { return base(layer, 1, kv_head); }
  const float* k(int32_t layer, int32_t kv_head) const { return base(layer, 0, kv_head); }
  const float* v(int32_t layer, int32_t kv_head) const { return base(layer, 1, kv_head); }

  KvCache Clone() const;

 private:
  KvCache() = default;
  float* base(int32_t layer, int32_t kind, int32_t kv_head) const {
    return data_.get() +
           ((static_cast<size_t>(layer) * 2 + static_cast<size_t>(kind)) * n_kv_heads_ +
            static_cast<size_t>(kv_head)) *
               static_cast<size_t>(n_ctx_) * static_cast<size_t>(head_dim_);
  }
  std::unique_ptr<float[]> data_;
  size_t n_floats_ = 0;
  int32_t n_ctx_ = 0;
  int32_t n_kv_heads_ = 0;
  int32_t head_dim_ = 0;
};

}  // namespace pocket
