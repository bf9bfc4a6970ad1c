// The transformer forward pass, written as plain code you can step through: a loop over layers
// calling AttentionBlock and FeedForwardBlock. Prefill (a batch of new tokens) and Decode (one
// token) are separate entry points; both append to the KV cache at the given position. Work is
// split over a thread pool by output rows (matrices) and by KV head and token block (attention);
// every output is computed by one thread, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pocket {

// Activation buffers for up to max_batch tokens and n_threads threads, allocated once per
// session: nothing on the decode path allocates.
class ForwardScratch {
 public:
  // Buffers only the dense (float) path needs are left out when every matrix is packed.
  static StatusOr<ForwardScratch> Create(const Model& model, int32_t max_batch, int32_t n_threads);
  int32_t max_batch() const { return max_batch_; }
  size_t bytes() const { return bytes_; }

  float* x = nullptr;         // [B, d_model] residual stream
  float* xn = nullptr;        // [B, max(d_model, q_dim, d_ff)] normalized input of a dense matrix
  float* qkv = nullptr;       // [B, q_dim + 2 kv_dim]
  float* attn = nullptr;      // [B, q_dim] attention output
  float* gate = nullptr;      // [B, d_ff] (SwiGLU output when packed)
  float* up = nullptr;        // [B, d_ff]
  QuantizedRows quant;        // int8 activations [B, max cols]
  float* rope_cos = nullptr;  // [B, head_dim / 2]
  float* rope_sin = nullptr;
  float* thread_scratch = nullptr;  // [n_threads, per_thread_floats]
  int64_t per_thread_floats = 0;

 private:
  std::unique_ptr<uint8_t[]> buffer_;
  int32_t max_batch_ = 0;
  size_t bytes_ = 0;
};

// Runs tokens at positions [pos0, pos0 + n) (n <= scratch.max_batch()), filling the KV cache.
// logits: [n, vocab] when all_positions, else [1, vocab] for the last token only (or null).
Status Prefill(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
               std::span<const int32_t> tokens, int32_t pos0, bool all_positions, float* logits);

// Runs tokens as Prefill does, but skips the output matrix: writes the final-norm hidden state
// of the last token (RMSNorm with output_norm, the output matrix's input; [d_model]) to `hidden`.
// Classification heads read it.
Status PrefillHidden(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
                     std::span<const int32_t> tokens, int32_t pos0, float* hidden);

// Candidate continuations of a prompt evaluated in one pass with a tree attention mask (each
// candidate sees the prompt and its own earlier tokens). The batch occupies KV slots
// [pos0, pos0 + tokens.size()), candidates one after another; each segment hides the slots of
// the candidates before its own.
struct TreeBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t>
      rope_pos;  // RoPE position of each token (candidates restart after the prompt)
  struct Segment {
    int32_t t_begin = 0, t_end = 0;            // batch tokens (at most 16, one candidate)
    int32_t hidden_begin = 0, hidden_end = 0;  // KV slots they must not see
  };
  std::vector<Segment> segments;  // cover the batch, in order
};

// Runs a tree batch (tokens.size() <= scratch.max_batch()); logits: [n, vocab] for every token.
Status PrefillTree(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
                   const TreeBatch& batch, int32_t pos0, float* logits);

// One token at position pos; logits: [vocab].
Status Decode(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
              int32_t token, int32_t pos, float* logits);

}  // namespace pocket
