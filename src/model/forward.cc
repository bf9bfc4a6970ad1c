#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "quant/quantize.h"

namespace pocket {
namespace {

// Everything one forward call needs, gathered once.
struct Pass {
  const ModelConfig& c;
  const ModelWeights& w;
  const KernelTable& k;
  KvCache& kv;
  ForwardScratch& s;
  int32_t n_tokens;
  int32_t pos0;
};

void MatMul(const Pass& p, const WeightMatrix& w, const float* x, float* y) {
  p.k.matmul(w, x, p.n_tokens, y, 0, w.rows, p.s.row);
}

Status Embed(const Pass& p, std::span<const int32_t> tokens) {
  const WeightMatrix& e = p.w.token_embd;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t id = tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= e.rows) {
      return OutOfRangeError("token id ", id, " at position ", p.pos0 + t,
                             " is outside the vocabulary (0 to ", e.rows - 1, ")");
    }
    DequantizeRow(e.type, e.row(id), p.s.x + static_cast<size_t>(t) * p.c.d_model, e.cols);
  }
  return Status::Ok();
}

void RopeTables(const Model& model, const Pass& p) {
  const int32_t half = p.c.head_dim / 2;
  const std::vector<double>& inv_freq = model.rope_inv_freq();
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const double pos = static_cast<double>(p.pos0 + t);
    for (int32_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[static_cast<size_t>(i)];
      p.s.rope_cos[t * half + i] = static_cast<float>(std::cos(angle));
      p.s.rope_sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void AddBias(float* y, const float* bias, int32_t n_tokens, int64_t n) {
  if (bias == nullptr) return;
  for (int32_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += bias[i];
  }
}

void AddInto(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// x += wo · attention(rope(q), rope(k), v) over all positions <= each token's own.
void AttentionBlock(const Pass& p, const LayerWeights& l, int32_t layer) {
  const ModelConfig& c = p.c;
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const bool interleaved = c.rope_style == RopeStyle::kInterleaved;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    p.k.rmsnorm(p.s.x + t * d, l.attn_norm, c.rms_eps, d, p.s.xn + t * d);
  }
  MatMul(p, l.wq, p.s.xn, p.s.q);
  MatMul(p, l.wk, p.s.xn, p.s.k);
  MatMul(p, l.wv, p.s.xn, p.s.v);
  AddBias(p.s.q, l.bq, p.n_tokens, qd);
  AddBias(p.s.k, l.bk, p.n_tokens, kvd);
  AddBias(p.s.v, l.bv, p.n_tokens, kvd);
  const int32_t half = c.head_dim / 2;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    float* q = p.s.q + t * qd;
    float* k = p.s.k + t * kvd;
    if (c.qk_norm) {  // [n_heads, head_dim]: each head normalized on its own
      for (int32_t h = 0; h < c.n_heads; ++h)
        p.k.rmsnorm(q + h * hd, l.q_norm, c.rms_eps, hd, q + h * hd);
      for (int32_t h = 0; h < c.n_kv_heads; ++h)
        p.k.rmsnorm(k + h * hd, l.k_norm, c.rms_eps, hd, k + h * hd);
    }
    p.k.rope(q, c.n_heads, hd, p.s.rope_cos + t * half, p.s.rope_sin + t * half, interleaved);
    p.k.rope(k, c.n_kv_heads, hd, p.s.rope_cos + t * half, p.s.rope_sin + t * half, interleaved);
    // Append this position's keys and values to the cache.
    const int32_t pos = p.pos0 + t;
    for (int32_t g = 0; g < c.n_kv_heads; ++g) {
      std::copy_n(k + g * hd, hd, p.kv.k(layer, g) + static_cast<size_t>(pos) * hd);
      std::copy_n(p.s.v + t * kvd + g * hd, hd, p.kv.v(layer, g) + static_cast<size_t>(pos) * hd);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t n_pos = p.pos0 + t + 1;  // causal: this token and everything before it
    for (int32_t h = 0; h < c.n_heads; ++h) {
      const int32_t g = h / c.gqa_group();
      p.k.attention_head(p.s.q + t * qd + h * hd, p.kv.k(layer, g), p.kv.v(layer, g), n_pos, hd, hd,
                         scale, p.s.scores, p.s.attn + t * qd + h * hd);
    }
  }
  MatMul(p, l.wo, p.s.attn, p.s.proj);
  AddInto(p.s.x, p.s.proj, p.n_tokens * d);
}

// x += w_down · (silu(w_gate · norm(x)) * (w_up · norm(x))).
void FeedForwardBlock(const Pass& p, const LayerWeights& l) {
  const ModelConfig& c = p.c;
  const int64_t d = c.d_model, ff = c.d_ff;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    p.k.rmsnorm(p.s.x + t * d, l.ffn_norm, c.rms_eps, d, p.s.xn + t * d);
  }
  MatMul(p, l.w_gate, p.s.xn, p.s.gate);
  MatMul(p, l.w_up, p.s.xn, p.s.up);
  p.k.silu_mul(p.s.gate, p.s.up, p.n_tokens * ff, p.s.gate);
  MatMul(p, l.w_down, p.s.gate, p.s.proj);
  AddInto(p.s.x, p.s.proj, p.n_tokens * d);
}

// Final norm and output projection for tokens [first, n_tokens).
void Logits(const Pass& p, int32_t first, float* logits) {
  const int64_t d = p.c.d_model;
  const int32_t n = p.n_tokens - first;
  for (int32_t t = 0; t < n; ++t) {
    p.k.rmsnorm(p.s.x + (first + t) * d, p.w.output_norm, p.c.rms_eps, d, p.s.xn + t * d);
  }
  p.k.matmul(p.w.output, p.s.xn, n, logits, 0, p.w.output.rows, p.s.row);
}

Status Run(const Model& model, KvCache& kv, ForwardScratch& s, std::span<const int32_t> tokens,
           int32_t pos0, bool all_positions, float* logits) {
  const ModelConfig& c = model.config();
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (n == 0) return InvalidArgumentError("no tokens to run");
  if (n > s.max_batch()) {
    return InternalError("batch of ", n, " tokens exceeds the scratch (", s.max_batch(), ")");
  }
  if (pos0 < 0 || pos0 + n > kv.n_ctx()) {
    return OutOfRangeError("positions ", pos0, " to ", pos0 + n - 1, " do not fit the context of ",
                           kv.n_ctx(), " tokens");
  }
  Pass p{c, model.weights(), model.kernels(), kv, s, n, pos0};
  POCKET_RETURN_IF_ERROR(Embed(p, tokens));
  RopeTables(model, p);
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = p.w.layers[static_cast<size_t>(layer)];
    AttentionBlock(p, l, layer);
    FeedForwardBlock(p, l);
  }
  if (logits != nullptr) Logits(p, all_positions ? 0 : n - 1, logits);
  return Status::Ok();
}

}  // namespace

StatusOr<ForwardScratch> ForwardScratch::Create(const ModelConfig& c, int32_t max_batch,
                                                int32_t n_ctx) {
  if (max_batch <= 0) return InvalidArgumentError("batch size must be positive, got ", max_batch);
  ForwardScratch s;
  s.max_batch_ = max_batch;
  const size_t b = static_cast<size_t>(max_batch);
  const size_t d = static_cast<size_t>(c.d_model), qd = static_cast<size_t>(c.q_dim()),
               kvd = static_cast<size_t>(c.kv_dim()), ff = static_cast<size_t>(c.d_ff),
               half = static_cast<size_t>(c.head_dim / 2);
  const size_t row = std::max({d, qd, ff});
  const size_t sizes[] = {b * d,  b * d,    b * qd,  b * kvd, b * kvd,
                          b * qd, b * d,    b * ff,  b * ff,  static_cast<size_t>(n_ctx),
                          row,    b * half, b * half};
  size_t total = 0;
  for (size_t n : sizes) total += (n + 15) / 16 * 16;  // 64-byte aligned slices
  s.buffer_.reset(new (std::nothrow) float[total + 16]);
  if (!s.buffer_) return ResourceExhaustedError("cannot allocate forward scratch");
  float* base = s.buffer_.get();
  base += (16 - (reinterpret_cast<uintptr_t>(base) / sizeof(float)) % 16) % 16;
  float** slots[] = {&s.x,    &s.xn, &s.q,      &s.k,   &s.v,        &s.attn,    &s.proj,
                     &s.gate, &s.up, &s.scores, &s.row, &s.rope_cos, &s.rope_sin};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    *slots[i] = base;
    base += (sizes[i] + 15) / 16 * 16;
  }
  return s;
}

Status Prefill(const Model& model, KvCache& kv, ForwardScratch& scratch,
               std::span<const int32_t> tokens, int32_t pos0, bool all_positions, float* logits) {
  return Run(model, kv, scratch, tokens, pos0, all_positions, logits);
}

Status Decode(const Model& model, KvCache& kv, ForwardScratch& scratch, int32_t token, int32_t pos,
              float* logits) {
  return Run(model, kv, scratch, std::span<const int32_t>(&token, 1), pos, false, logits);
}

}  // namespace pocket
