// Scalar reference kernels: plain loops, float32 accumulation, no ISA intrinsics. Slow on purpose;
// they are the oracle.
#include <cmath>

#include "kernels/kernel_table.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void RefMatmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t row_begin,
               int64_t row_end, float* scratch) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row;
    if (w.type == DType::kF32) {
      row = reinterpret_cast<const float*>(w.row(r));
    } else {
      DequantizeRow(w.type, w.row(r), scratch, w.cols);
      row = scratch;
    }
    for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = Dot(row, x + t * w.cols, w.cols);
  }
}

void RefRmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void RefRope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
             bool interleaved) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = interleaved ? 2 * i : i;
      const int64_t b = interleaved ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos[i] - x1 * sin[i];
      v[b] = x1 * cos[i] + x0 * sin[i];
    }
  }
}

void RefSiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void RefAttentionHead(const float* q, const float* k, const float* v, int64_t n_pos,
                      int64_t head_dim, int64_t kv_stride, float scale, float* scores, float* out) {
  float max_score = -INFINITY;
  for (int64_t p = 0; p < n_pos; ++p) {
    scores[p] = Dot(q, k + p * kv_stride, head_dim) * scale;
    max_score = std::fmax(max_score, scores[p]);
  }
  float sum = 0.0f;
  for (int64_t p = 0; p < n_pos; ++p) {
    scores[p] = std::exp(scores[p] - max_score);
    sum += scores[p];
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t p = 0; p < n_pos; ++p) {
    const float weight = scores[p] * inv;
    const float* vp = v + p * kv_stride;
    for (int64_t d = 0; d < head_dim; ++d) out[d] += weight * vp[d];
  }
}

}  // namespace

const KernelTable& ReferenceKernels() {
  static const KernelTable kTable = {
      .name = "reference",
      .matmul = RefMatmul,
      .rmsnorm = RefRmsnorm,
      .rope = RefRope,
      .silu_mul = RefSiluMul,
      .attention_head = RefAttentionHead,
  };
  return kTable;
}

}  // namespace pocket
