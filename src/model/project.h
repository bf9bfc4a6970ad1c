// Internal to the forward pass: the matrix products (out = W · norm?(x)), one function per form.
// forward.cc chooses the form for each run of rows; the forms are
//   - one row (decode): every thread quantizes the row itself, one parallel region;
//   - exact: the packed matmul's per-group form for a few rows (bit-identical per row to one row);
//   - tiles: the prefill form of large batches (activation blocks of up to 512 columns, weights
//     requantized per row; kernel_table.h), where the table has a tile engine;
//   - dense: float (or GGUF block) matrices that are not packed.
#pragma once

#include <array>
#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "model/adapter.h"
#include "model/config.h"
#include "model/scratch.h"
#include "model/weights.h"

namespace pocket {

// What every form needs: the arithmetic, the buffers, the threads.
struct ProjectContext {
  const ModelConfig& c;
  const KernelTable& k;
  ForwardScratch& s;
  ThreadPool& pool;
  float* thread_scratch(int t) const { return s.thread_scratch + t * s.per_thread_floats; }
};

// The adapters' term of one matrix: which targets its logical outputs hold (q|k|v of the fused
// matrix, gate|up, or one), at which output offset, and the delta's row stride (its outputs).
struct LoraPart {
  LoraTarget target = LoraTarget::kQ;
  int64_t offset = 0;
  int64_t rows = 0;
};
struct LoraTerm {
  int32_t layer = 0;
  std::array<LoraPart, 3> parts = {};
  int n_parts = 0;
  int64_t width = 0;
};

// The low-rank term in two steps, so each can be split over threads: the intermediates (mid:
// one row per rank row of every adapter's part, scaled by the adapter's and the user's scale;
// LoraMidCount rows in all) and the outputs (delta[t][o] = sum over the set of B·mid, zero
// where no adapter has the part). Rows [row_begin, row_end) of the intermediates and outputs
// [o_begin, o_end) for n tokens; xn: the (normalized) inputs, row stride ldxn; scratch: a
// thread's lora_scratch. Each value is one dense-kernel dot in the canonical order, so it never
// depends on the split, the batch or the thread count.
int64_t LoraMidCount(const LoraTerm& term, const AdapterSet& set);
void LoraMidRows(const ProjectContext& p, const LoraTerm& term, const AdapterSet& set,
                 const float* xn, int64_t ldxn, int64_t n, int64_t row_begin, int64_t row_end,
                 float* mid, int64_t ldmid, float* scratch);
void LoraDeltaRows(const ProjectContext& p, const LoraTerm& term, const AdapterSet& set,
                   const float* mid, int64_t ldmid, int64_t n, int64_t o_begin, int64_t o_end,
                   float* delta);

// Segments of at least this many rows use the tile form (when the table has prefill_gemm).
inline constexpr int32_t kTileFormMinRows = 32;

// Columns per activation block of the tile form; 0 when no block fits (then the exact form).
int32_t TileBlock(const PackedLayout& l);

// out = W · norm?(x) for rows [0, n) of x (row stride ldx) in the given form. out.add, when set,
// is the additive term of kernel_table.h (a low-rank delta joining before the epilogue).
// With `lora` and `set` (one row), the threads first compute the term's intermediates into
// ForwardScratch::lora_mid (a share each, then a barrier), then each the term's outputs of its
// own panels into out.add (which must point at ForwardScratch::lora_delta, row stride
// lora->width): one parallel region.
void ProjectOneRow(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx,
                   const float* norm, const GemmOut& out, const LoraTerm* lora = nullptr,
                   const AdapterSet* set = nullptr);
// With `lora` and `sets` (each row's adapter set; null or empty: none; out.add null), the term
// joins in the same two regions: each thread computes the intermediates of the rows it quantizes
// (into ForwardScratch::lora_mid, row stride lora_mid_floats, sized for every row of a pass),
// then per chunk of up to kLoraChunkRows rows the term's outputs of its own panels into
// ForwardScratch::lora_delta and its panels' products with that delta as their additive term.
void ProjectPacked(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                   const float* norm, const GemmOut& out, bool tiles,
                   const LoraTerm* lora = nullptr, const AdapterSet* const* sets = nullptr);
// The term's outputs [o_begin, o_end) for n rows whose sets are sets[0..n) (runs of rows sharing
// a set go together; rows without adapters get zeros); delta's row stride is term.width.
void LoraDeltaRuns(const ProjectContext& p, const LoraTerm& term, const AdapterSet* const* sets,
                   const float* mid, int64_t ldmid, int64_t n, int64_t o_begin, int64_t o_end,
                   float* delta);
void ProjectDense(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                  const float* norm, const GemmOut& out);

}  // namespace pocket
