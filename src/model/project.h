// Internal to the forward pass: the matrix products (out = W · norm?(x)), one function per form.
// forward.cc chooses the form for each run of rows; the forms are
//   - one row (decode): every thread quantizes the row itself, one parallel region;
//   - exact: the packed matmul's per-group form for a few rows (bit-identical per row to one row);
//   - tiles: the prefill form of large batches (activation blocks of up to 512 columns, weights
//     requantized per row; kernel_table.h), where the table has a tile engine;
//   - dense: float (or GGUF block) matrices that are not packed.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
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

// Segments of at least this many rows use the tile form (when the table has prefill_gemm).
inline constexpr int32_t kTileFormMinRows = 32;

// Columns per activation block of the tile form; 0 when no block fits (then the exact form).
int32_t TileBlock(const PackedLayout& l);

// out = W · norm?(x) for rows [0, n) of x (row stride ldx) in the given form. out.add, when set,
// is the additive term of kernel_table.h (a low-rank delta joining before the epilogue).
void ProjectOneRow(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx,
                   const float* norm, const GemmOut& out);
void ProjectPacked(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                   const float* norm, const GemmOut& out, bool tiles);
void ProjectDense(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                  const float* norm, const GemmOut& out);

}  // namespace pocket
