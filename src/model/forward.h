// The transformer forward pass, written as plain code you can step through: a loop over layers
// calling AttentionBlock and FeedForwardBlock. Prefill (a batch of new tokens) and decode (one
// token) are separate entry points; both append to the KV cache at the given position.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pocket {

// Activation buffers for up to max_batch tokens, allocated once per session: nothing on the
// decode path allocates.
class ForwardScratch {
 public:
  static StatusOr<ForwardScratch> Create(const ModelConfig& config, int32_t max_batch,
                                         int32_t n_ctx);
  int32_t max_batch() const { return max_batch_; }

  float* x = nullptr;         // [B, d_model] residual stream
  float* xn = nullptr;        // [B, d_model] normalized
  float* q = nullptr;         // [B, q_dim]
  float* k = nullptr;         // [B, kv_dim]
  float* v = nullptr;         // [B, kv_dim]
  float* attn = nullptr;      // [B, q_dim] attention output before wo
  float* proj = nullptr;      // [B, d_model] output of wo / w_down
  float* gate = nullptr;      // [B, d_ff]
  float* up = nullptr;        // [B, d_ff]
  float* scores = nullptr;    // [n_ctx]
  float* row = nullptr;       // [max(d_model, q_dim, d_ff)] dequantized weight row
  float* rope_cos = nullptr;  // [B, head_dim / 2]
  float* rope_sin = nullptr;  // [B, head_dim / 2]

 private:
  std::unique_ptr<float[]> buffer_;
  int32_t max_batch_ = 0;
};

// Runs tokens at positions [pos0, pos0 + n) (n <= scratch.max_batch()), filling the KV cache.
// logits: [n, vocab] when all_positions, else [1, vocab] for the last token only.
Status Prefill(const Model& model, KvCache& kv, ForwardScratch& scratch,
               std::span<const int32_t> tokens, int32_t pos0, bool all_positions, float* logits);

// One token at position pos; logits: [vocab].
Status Decode(const Model& model, KvCache& kv, ForwardScratch& scratch, int32_t token, int32_t pos,
              float* logits);

}  // namespace pocket
