// The activation buffers of the forward pass: one allocation per session (or engine), made of
// named regions, so nothing on the decode path allocates. Regions that are never live at the same
// time share bytes, and say so where they are declared (ScratchPlan::Overlay).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kernels/kernel_table.h"
#include "model/adapter.h"
#include "model/model.h"

namespace pocket {

// A buffer laid out as named regions, each 64-byte aligned. Region pointers are filled in by
// Allocate.
class ScratchPlan {
 public:
  struct Region {
    std::string_view name;
    size_t bytes = 0;
    void** out = nullptr;  // receives the region's address
  };
  // A region of its own.
  void Add(std::string_view name, size_t bytes, void** out);
  // Two groups of regions that are never live at the same time: each group is laid out region
  // after region, and both groups start at the same offset (the larger one sets the size).
  void Overlay(std::initializer_list<Region> first, std::initializer_list<Region> second);
  // One buffer for every region; the names appear in the error when it cannot be allocated.
  StatusOr<std::unique_ptr<uint8_t[]>> Allocate(size_t* total_bytes);

 private:
  struct Placed {
    Region region;
    size_t offset;
  };
  std::vector<Placed> placed_;
  size_t size_ = 0;
};

// The KV blocks a tree branch's gathered tail holds (BatchSegment::path), and so the positions from
// the 16-position block where its path starts to its last row.
inline constexpr int32_t kTreeTailBlocks = 3;
inline constexpr int32_t kTreeTailPositions = kTreeTailBlocks * 16;

// Activation buffers for up to max_batch rows and n_threads threads.
class ForwardScratch {
 public:
  // Buffers only the dense (float) path needs are left out when every matrix is packed.
  static StatusOr<ForwardScratch> Create(const Model& model, int32_t max_batch, int32_t n_threads);
  int32_t max_batch() const { return max_batch_; }
  int32_t n_threads() const { return n_threads_; }
  size_t bytes() const { return bytes_ + lora_bytes_; }
  // Row indices [begin, end) (an output_rows list for "every row" or a range of them).
  std::span<const int32_t> rows(int32_t begin, int32_t end) const {
    return std::span<const int32_t>(row_ids_).subspan(static_cast<size_t>(begin),
                                                      static_cast<size_t>(end - begin));
  }

  float* x = nullptr;     // [B, d_model] residual stream
  float* xn = nullptr;    // [B, max(d_model, q_dim, d_ff)] normalized input of a dense matrix
  float* qkv = nullptr;   // [B, q_dim + 2 kv_dim]   } attention block
  float* attn = nullptr;  // [B, q_dim] output        }
  float* gate = nullptr;  // [B, d_ff] (SwiGLU output when packed)  } feed-forward block, over
  float* up = nullptr;    // [B, d_ff] (dense path only)            } the attention block's bytes
  QuantizedRows quant;    // int8 activations [B, max cols], scales and sums [B, max groups]
  float* rope_cos = nullptr;        // [B, head_dim / 2]
  float* rope_sin = nullptr;        // [B, head_dim / 2]
  float* thread_scratch = nullptr;  // [n_threads, per_thread_floats]
  int64_t per_thread_floats = 0;
  // Per thread: the gathered tail of a tree branch's KV head (BatchSegment::path), kTreeTailBlocks
  // blocks of K and of V and their kQ8 scales; tree_tail_bytes each.
  uint8_t* tree_tail = nullptr;
  size_t tree_tail_bytes = 0;

  // Bookkeeping of one pass, sized for max_batch segments up front (a pass only clears and
  // refills them): row runs that share a kernel form, and the first attention task of each
  // segment.
  struct FormRun {
    int32_t row_begin = 0, row_end = 0;
    bool tiles = false;  // the tile form of large batches (else the exact per-group form)
  };
  std::vector<FormRun> runs;
  std::vector<int64_t> task_begin;  // [segments + 1]
  // The adapter set of each row of the pass (null: none), filled by Forward.
  std::vector<const AdapterSet*> row_adapters;

  // Buffers of the adapters' low-rank terms (GemmOut::add), made by ReserveAdapters when a
  // session takes adapters (never on the decode path): the delta of up to kLoraChunkRows rows of
  // the widest projection, their inputs, the rank-sized intermediates of every row, and per
  // thread the dense kernels' scratch.
  static constexpr int32_t kLoraChunkRows = 64;
  float* lora_delta = nullptr;   // [kLoraChunkRows, lora_width]
  float* lora_xn = nullptr;      // [kLoraChunkRows, max(d_model, q_dim, d_ff)] normalized inputs
  float* lora_mid = nullptr;     // [max(max_batch, kLoraChunkRows), lora_mid_floats] intermediates
  int64_t lora_width = 0;        // the widest projection's outputs (q|k|v, gate|up, ...)
  float* lora_thread = nullptr;  // [n_threads, lora_thread_floats]
  int64_t lora_thread_floats = 0;
  int64_t lora_mid_floats = 0;  // what the buffers were sized for (0: no adapters)
  // Sizes the adapter buffers for a set whose AdapterMidFloats is `mid_floats` (grows only).
  Status ReserveAdapters(const Model& model, int64_t mid_floats);
  int64_t lora_cols = 0;          // max(d_model, q_dim, d_ff)
  int64_t lora_dense_floats = 0;  // dense_gemm's scratch at lora_scratch(t)
  // A thread's scratch for the dense kernels, and its row for one normalized input.
  float* lora_scratch(int t) const { return lora_thread + t * lora_thread_floats; }
  float* lora_thread_xn(int t) const { return lora_scratch(t) + lora_dense_floats; }

 private:
  std::unique_ptr<uint8_t[]> buffer_;
  std::unique_ptr<float[]> lora_buffer_;
  size_t lora_bytes_ = 0;
  std::vector<int32_t> row_ids_;  // 0, 1, ..., max_batch - 1
  int32_t max_batch_ = 0;
  int32_t n_threads_ = 0;
  size_t bytes_ = 0;
};

}  // namespace pocket
