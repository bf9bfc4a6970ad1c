// The one place the forward pass gets its arithmetic from: a table of function pointers chosen
// once from the CPU's features (SelectKernels). Everything above this layer calls through the
// table; ISA-specific code lives only in kernels/x86 and kernels/arm.
#pragma once

#include <cstdint>
#include <string_view>

#include "quant/dtype.h"

namespace pocket {

// A weight matrix [rows = out_features, cols = in_features], row-major, each row RowBytes(type,
// cols) bytes (a view into the mapped model file or a repacked buffer).
struct WeightMatrix {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

struct KernelTable {
  std::string_view name;

  // y[t, r] = sum_c w[r, c] * x[t, c] for t < n_tokens and r in [row_begin, row_end).
  // x: [n_tokens, w.cols], y: [n_tokens, w.rows] (only the given rows are written).
  // scratch: at least w.cols floats.
  void (*matmul)(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                 int64_t row_begin, int64_t row_end, float* scratch);

  // y = x / sqrt(mean(x^2) + eps) * weight, over n elements (y may alias x).
  void (*rmsnorm)(const float* x, const float* weight, float eps, int64_t n, float* y);

  // In place on x: [n_heads, head_dim]. cos/sin: [head_dim / 2] for this position.
  // interleaved: pairs (x[2i], x[2i+1]) (GGUF llama, llama2.c); else rotate-half pairs
  // (x[i], x[i + head_dim/2]) (Hugging Face, qwen2/qwen3).
  void (*rope)(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
               bool interleaved);

  // out[i] = silu(gate[i]) * up[i].
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);

  // Attention of one query head over positions [0, n_pos) of one KV head.
  // q: [head_dim]; k, v: [n_pos, head_dim] with row stride kv_stride floats; out: [head_dim].
  // scores: scratch of n_pos floats.
  void (*attention_head)(const float* q, const float* k, const float* v, int64_t n_pos,
                         int64_t head_dim, int64_t kv_stride, float scale, float* scores,
                         float* out);
};

// The scalar reference table: the ground truth every other table is tested against.
const KernelTable& ReferenceKernels();
// The best table for this CPU.
const KernelTable& SelectKernels();

}  // namespace pocket
