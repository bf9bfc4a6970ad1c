#include "model/kv_cache.h"

#include <cstring>
#include <new>

namespace pocket {

StatusOr<KvCache> KvCache::Create(const ModelConfig& config, int32_t n_ctx) {
  if (n_ctx <= 0) return InvalidArgumentError("context size must be positive, got ", n_ctx);
  KvCache kv;
  kv.n_ctx_ = n_ctx;
  kv.n_kv_heads_ = config.n_kv_heads;
  kv.head_dim_ = config.head_dim;
  kv.n_floats_ = static_cast<size_t>(config.n_layers) * 2 * static_cast<size_t>(config.n_kv_heads) *
                 static_cast<size_t>(n_ctx) * static_cast<size_t>(config.head_dim);
  // Not zero-filled: pages are touched only as positions are written.
  kv.data_.reset(new (std::nothrow) float[kv.n_floats_]);
  if (!kv.data_) {
    return ResourceExhaustedError("cannot allocate the KV cache: ", HumanBytes(kv.bytes()),
                                  " for a context of ", n_ctx);
  }
  return kv;
}

KvCache KvCache::Clone() const {
  KvCache kv;
  kv.n_ctx_ = n_ctx_;
  kv.n_kv_heads_ = n_kv_heads_;
  kv.head_dim_ = head_dim_;
  kv.n_floats_ = n_floats_;
  kv.data_.reset(new float[n_floats_]);
  std::memcpy(kv.data_.get(), data_.get(), bytes());
  return kv;
}

}  // namespace pocket
