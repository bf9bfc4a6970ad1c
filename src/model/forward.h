// The transformer forward pass, written as plain code you can step through: a loop over layers
// calling AttentionBlock and FeedForwardBlock. There is ONE entry, Forward, and it takes a batch
// description (in the spirit of llama.cpp's llama_batch and gemma.cpp's QBatch): rows of tokens
// cut into segments, each with its own KV cache, KV slots, RoPE positions and visibility. Prefill
// (one segment of many rows), decode (one row), candidate scoring (one segment per candidate over
// one cache, each hiding the others) and classification (no logits, the final hidden state) are
// all callers of it; a batched engine puts the rows of many sessions into one call.
//
// Work is split over a thread pool by output rows (matrices) and by KV head and block of 16 rows
// (attention); every output is computed by one thread, so results do not depend on the thread
// count. The kernel form (the exact per-group form, or the tile form of large batches) is chosen
// per segment from that segment's own row count, so a row computes the same numbers whatever
// else shares its batch.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#if POCKET_FORWARD_TRACE
#include <functional>
#endif

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/scratch.h"

namespace pocket {

// Which KV slots the rows of a segment see (always only slots of the segment's own cache).
enum class Visibility : uint8_t {
  // Row t sees slots [0, its own slot], minus the segment's hidden range.
  kCausal,
  // Every row sees slots [0, the segment's last slot], minus the hidden range: each row sees the
  // segment's later rows too (block drafters, encoders).
  kBidirectional,
};

// A run of consecutive rows of the batch that share a KV cache. Row row_begin + i writes its keys
// and values to slot kv_pos + i of `kv` and is rotated to RoPE position rope_pos + i.
struct BatchSegment {
  KvCache* kv = nullptr;
  int32_t row_begin = 0;
  int32_t row_end = 0;
  int32_t kv_pos = 0;
  int32_t rope_pos = -1;  // -1: kv_pos (the usual case; tree scoring restarts positions)
  Visibility visibility = Visibility::kCausal;
  // Slots [hidden_begin, hidden_end) of the cache that no row of the segment sees (a tree batch:
  // each candidate hides the candidates stored before it). Must end at or before kv_pos.
  int32_t hidden_begin = 0;
  int32_t hidden_end = 0;
  // A branch of a draft tree (speculative verification of several branches in one pass): when
  // path_from >= 0, the rows continue a path whose logical positions [path_from, path_from +
  // path.size()) are at the slots `path` lists (positions before path_from at their own slots).
  // Row i is at logical position path_from + path.size() + i (its RoPE position; rope_pos must be
  // -1), stored at slot kv_pos + i, and sees logical positions [0, its own]. Attention gathers the
  // path's rows (kernels see them at their logical positions), so a row computes exactly what it
  // would in consecutive slots. Causal, no hidden range; path_from <= kv_pos; at most
  // kTreeTailPositions positions from the 16-position block of path_from to the last row.
  int32_t path_from = -1;
  std::span<const int32_t> path = {};
  // The adapters the rows apply (null or empty: none); ForwardScratch::ReserveAdapters must have
  // sized the scratch for them.
  const AdapterSet* adapters = nullptr;
  int32_t n_rows() const { return row_end - row_begin; }
  int32_t first_position() const {
    if (path_from >= 0) return path_from + static_cast<int32_t>(path.size());
    return rope_pos >= 0 ? rope_pos : kv_pos;
  }
};

#if POCKET_FORWARD_TRACE
// Receives an intermediate of the pass: rows [0, n_rows) of `cols` floats, row stride ld.
using ForwardTrace = std::function<void(std::string_view name, const float* x, int64_t n_rows,
                                        int64_t cols, int64_t ld)>;
#endif

// What Forward computes and where the results go.
struct ForwardBatch {
  std::span<const int32_t> tokens;         // one per row; at most scratch.max_batch() rows
  std::span<const BatchSegment> segments;  // cover the rows in order, without gaps
  // Rows whose outputs are returned (ascending, each once); the outputs below are indexed by the
  // position in this list.
  std::span<const int32_t> output_rows;
  float* logits = nullptr;        // [output_rows.size(), vocab], or null for none
  float* final_hidden = nullptr;  // [output_rows.size(), d_model]: final-norm hidden states
  // The residual stream after each of these layers (0-based), for drafters that condition on the
  // target's hidden states: [layers.size(), rows, d_model] for the rows `hidden_rows` lists
  // (ascending, each once), or output_rows when it is empty (a prefill for a block drafter needs
  // the hidden states of every row but the logits of the last only).
  std::span<const int32_t> hidden_layers;
  float* layer_hidden = nullptr;
  std::span<const int32_t> hidden_rows;
#if POCKET_FORWARD_TRACE
  // Debug builds only (compiled out of release): every intermediate the numpy reference can
  // recompute, by name ("embed", "blk.3.attn_out", "blk.3.ffn_out", "output_norm"), all rows.
  const ForwardTrace* trace = nullptr;
#endif
};

// Runs the batch: appends every row's keys and values to its segment's cache and fills the
// requested outputs. Errors name the row, token and slot (a token outside the vocabulary, slots
// outside a cache, a malformed batch).
Status Forward(const Model& model, ForwardScratch& scratch, ThreadPool& pool,
               const ForwardBatch& batch);

}  // namespace pocket
