// Scalar reference kernels: plain loops, no ISA intrinsics. Slow on purpose; they define the
// results (see kernel_table.h and reference/canonical.h) that every fast table must reproduce.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/float16.h"
#include "kernels/kernel_table.h"
#include "kernels/reference/canonical.h"
#include "kernels/reference/reference_kernels.h"
#include "quant/quantize.h"

namespace pocket {
namespace reference {

void Rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const float mean = canonical::SumOfSquares(x, n) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void QuantizeGroup(const float* x, int32_t n, int8_t* q, float* scale, float* sum) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *scale = amax / 127.0f;
  int32_t s = 0;
  for (int32_t i = 0; i < n; ++i) {
    // nearbyint: round half to even, as the vector conversions do.
    const float r = std::nearbyint(x[i] * inv);
    const int32_t v = static_cast<int32_t>(std::min(127.0f, std::max(-127.0f, r)));
    q[i] = static_cast<int8_t>(v);
    s += v;
  }
  *sum = static_cast<float>(s);  // exact: |s| <= 127 * group < 2^24
}

void QuantizeRows(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                  const float* norm_weight, float eps, QuantizedRows* out) {
  const int32_t group = out->group;
  const int64_t n_groups = cols / group;
  float normalized[4096];  // one group (PackedLayout::Validate caps groups at 4096)
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * ldx;
    float inv_rms = 1.0f;
    if (norm_weight != nullptr) {
      const float mean = canonical::SumOfSquares(row, cols) / static_cast<float>(cols);
      inv_rms = 1.0f / std::sqrt(mean + eps);
    }
    for (int64_t g = 0; g < n_groups; ++g) {
      const float* src = row + g * group;
      if (norm_weight != nullptr) {
        for (int32_t i = 0; i < group; ++i) {
          normalized[i] = src[i] * inv_rms * norm_weight[g * group + i];
        }
        src = normalized;
      }
      QuantizeGroup(src, group, out->q + t * cols + g * group, &out->scale[t * n_groups + g],
                    &out->sum[t * n_groups + g]);
    }
  }
}

float Silu(float x) {
  return x / (1.0f + std::exp(-x));
}

// The epilogue of one result v = (W x)[r] of token t (kStore / kAccumulate), with out.add's term.
void StoreRow(const GemmOut& out, int64_t t, int64_t r, float v) {
  if (out.add != nullptr) v += out.add[t * out.ld_add + r];
  float& y = out.y[t * out.ld + r];
  if (out.epilogue == Epilogue::kAccumulate) {
    y += v;
  } else {
    y = v;
  }
}

// Writes one panel's results for token t through the epilogue (gate holds a SwiGLU pair's gate).
// SwiGLU output column j = 16 (p / 2) + r takes the add term's columns j (gate) and rows / 2 + j
// (up): pre = acc + add, then the activation on pre.
void PanelEpilogue(const PackedLayout& l, const GemmOut& out, int64_t t, int64_t p, const float* y,
                   float* gate) {
  if (out.epilogue == Epilogue::kSwiGlu) {
    if (p % 2 == 0) {
      std::memcpy(gate, y, kPanelRows * sizeof(float));
    } else {
      for (int64_t r = 0; r < kPanelRows; ++r) {
        const int64_t j = (p / 2) * kPanelRows + r;
        float g = gate[r], u = y[r];
        if (out.add != nullptr) {
          g += out.add[t * out.ld_add + j];
          u += out.add[t * out.ld_add + l.rows / 2 + j];
        }
        out.y[t * out.ld + j] = Silu(g) * u;
      }
    }
    return;
  }
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const int64_t row = p * kPanelRows + r;
    if (row < l.rows) StoreRow(out, t, row, y[r]);
  }
}

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  const PackedLayout& l = w.layout;
  const int64_t n_groups = l.n_groups();
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    float gate[kPanelRows];
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      float y[kPanelRows];
      for (int64_t r = 0; r < kPanelRows; ++r) {
        const int64_t row = p * kPanelRows + r;
        float acc_f = 0.0f;
        for (int64_t g = 0; g < n_groups; ++g) {
          int32_t acc = 0;
          float d = 0.0f, m = 0.0f;
          for (int64_t kk = 0; kk < l.group; ++kk) {
            int code;
            PackedWeight(w, row, g * l.group + kk, &code, &d, &m);
            acc += code * a.q[t * a.cols + g * l.group + kk];
          }
          const float v = std::fma(m, a.sum[t * n_groups + g], d * static_cast<float>(acc));
          acc_f = std::fma(a.scale[t * n_groups + g], v, acc_f);
        }
        y[r] = acc_f;
      }
      PanelEpilogue(l, out, t, p, y, gate);
    }
  }
}

void PrefillGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                 int64_t panel_end, const GemmOut& out) {
  const PackedLayout& l = w.layout;
  const int32_t block = a.group;
  const int64_t n_blocks = l.cols / block;
  std::vector<int8_t> q(static_cast<size_t>(kPanelRows * l.cols));
  std::vector<float> scale(static_cast<size_t>(kPanelRows));
  std::vector<float> gates(static_cast<size_t>(a.n_tokens * kPanelRows));
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    // Requantize the panel's rows block by block, from each group's (d, m).
    const float c_max = l.codes == PackedCodes::kU4 ? 15.0f : 255.0f;
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const int64_t row = p * kPanelRows + r;
      float amax = 0.0f;
      int code;
      float d, m;
      if (row < l.rows) {
        for (int64_t k = 0; k < l.cols; k += l.group) {
          PackedWeight(w, row, k, &code, &d, &m);
          amax = std::max(amax, std::max(std::fabs(m), std::fabs(d * c_max + m)));
        }
      }
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      scale[r] = amax / 127.0f;
      for (int64_t k = 0; k < l.cols; ++k) {
        float v = 0.0f;
        if (row < l.rows) {
          PackedWeight(w, row, k, &code, &d, &m);
          v = std::nearbyint((d * inv) * static_cast<float>(code) + m * inv);
        }
        q[r * l.cols + k] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, v)));
      }
    }
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      float y[kPanelRows];
      for (int64_t r = 0; r < kPanelRows; ++r) {
        float acc_f = 0.0f;
        for (int64_t b = 0; b < n_blocks; ++b) {
          int32_t acc = 0;
          for (int32_t k = 0; k < block; ++k) {
            acc += q[r * l.cols + b * block + k] * a.q[t * a.cols + b * block + k];
          }
          acc_f = std::fma(static_cast<float>(acc), a.scale[t * n_blocks + b], acc_f);
        }
        y[r] = acc_f * scale[r];
      }
      // Panels run outermost here, so a SwiGLU pair keeps each token's gate until its up panel.
      PanelEpilogue(l, out, t, p, y, &gates[static_cast<size_t>(t) * kPanelRows]);
    }
  }
}

void DenseGemm(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
               int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row;
    if (w.type == DType::kF32) {
      row = reinterpret_cast<const float*>(w.row(r));
    } else {
      DequantizeRow(w.type, w.row(r), scratch, w.cols);
      row = scratch;
    }
    for (int64_t t = 0; t < n_tokens; ++t)
      StoreRow(out, t, r, canonical::Dot(row, x + t * ldx, w.cols));
  }
}

void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
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

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

double LogSumExp(const float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  return max + std::log(sum);
}

// One cache element of K at (pos, d) / V at (pos, d), as float.
float LoadK(const KvHeadView& kv, int64_t pos, int64_t d) {
  const int64_t block = pos / kKvBlockPositions, lane = pos % kKvBlockPositions;
  switch (kv.type) {
    case KvType::kF32:
      return kv.KeyRow<const float>(block, d)[lane];
    case KvType::kF16:
      return Fp16ToFloat(kv.KeyRow<const uint16_t>(block, d)[lane]);
    case KvType::kQ8:
      return *kv.KeyScale(pos) * kv.KeyRow<const int8_t>(block, d)[lane];
  }
  return 0.0f;
}

float LoadV(const KvHeadView& kv, int64_t pos, int64_t d) {
  switch (kv.type) {
    case KvType::kF32:
      return kv.ValueRow<const float>(pos)[d];
    case KvType::kF16:
      return Fp16ToFloat(kv.ValueRow<const uint16_t>(pos)[d]);
    case KvType::kQ8:
      return *kv.ValueScale(pos) * kv.ValueRow<const int8_t>(pos)[d];
  }
  return 0.0f;
}

void StoreQ8Row(const float* x, int32_t n, int8_t* q, int64_t stride, float* scale) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *scale = amax / 127.0f;
  for (int32_t i = 0; i < n; ++i) {
    q[i * stride] =
        static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, std::nearbyint(x[i] * inv))));
  }
}

void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv) {
  const int64_t hd = kv.head_dim;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = pos + i;
    const float* kr = k + i * ldk;
    const float* vr = v + i * ldv;
    // Position p is lane p % 16 of K block p / 16: element (p, d) at KeyRow(block, d)[lane].
    const int64_t block = p / kKvBlockPositions, lane = p % kKvBlockPositions;
    switch (kv.type) {
      case KvType::kF32:
        for (int64_t d = 0; d < hd; ++d) {
          kv.KeyRow<float>(block, d)[lane] = kr[d];
          kv.ValueRow<float>(p)[d] = vr[d];
        }
        break;
      case KvType::kF16:
        for (int64_t d = 0; d < hd; ++d) {
          kv.KeyRow<uint16_t>(block, d)[lane] = FloatToFp16(kr[d]);
          kv.ValueRow<uint16_t>(p)[d] = FloatToFp16(vr[d]);
        }
        break;
      case KvType::kQ8:
        StoreQ8Row(kr, static_cast<int32_t>(hd), kv.KeyRow<int8_t>(block, 0) + lane,
                   kKvBlockPositions, kv.KeyScale(p));
        StoreQ8Row(vr, static_cast<int32_t>(hd), kv.ValueRow<int8_t>(p), 1, kv.ValueScale(p));
        break;
    }
  }
}

// Plain softmax attention per query token and head (two passes over the positions).
void Attention(const AttentionTask& task, float* scratch) {
  const int64_t hd = task.kv.head_dim;
  for (int64_t t = task.t_begin; t < task.t_end; ++t) {
    const int64_t n_pos = VisibleEnd(task, t);
    for (int32_t h = 0; h < task.n_q_heads; ++h) {
      const float* q = task.q + t * task.ldq + h * hd;
      float* out = task.out + t * task.ldo + h * hd;
      float max_score = -INFINITY;
      // scratch holds the scores of this head: reuse it position by position in chunks.
      const auto hidden = [&task](int64_t p) {
        return p >= task.hidden_begin && p < task.hidden_end;
      };
      for (int64_t p = 0; p < n_pos; ++p) {
        if (hidden(p)) continue;
        float s = 0.0f;
        for (int64_t d = 0; d < hd; ++d) s += q[d] * LoadK(task.kv, p, d);
        max_score = std::max(max_score, s * task.scale);
      }
      double sum = 0.0;
      for (int64_t d = 0; d < hd; ++d) scratch[d] = 0.0f;
      for (int64_t p = 0; p < n_pos; ++p) {
        if (hidden(p)) continue;
        float s = 0.0f;
        for (int64_t d = 0; d < hd; ++d) s += q[d] * LoadK(task.kv, p, d);
        const float e = std::exp(s * task.scale - max_score);
        sum += e;
        for (int64_t d = 0; d < hd; ++d) scratch[d] += e * LoadV(task.kv, p, d);
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t d = 0; d < hd; ++d) out[d] = scratch[d] * inv;
    }
  }
}

void PrefillAttentionBf16(const AttentionTask& task, float* scratch) {
  const int64_t hd = task.kv.head_dim;
  const auto bf = [](float v) { return Bf16ToFloat(FloatToBf16(v)); };
  constexpr int64_t kChunk = 32;
  for (int64_t t = task.t_begin; t < task.t_end; ++t) {
    const int64_t n_pos = VisibleEnd(task, t);
    for (int32_t h = 0; h < task.n_q_heads; ++h) {
      const float* q = task.q + t * task.ldq + h * hd;
      float* out = task.out + t * task.ldo + h * hd;
      float* acc = scratch;
      for (int64_t d = 0; d < hd; ++d) acc[d] = 0.0f;
      float run_max = -INFINITY, sum = 0.0f;
      float s[kChunk];
      for (int64_t c0 = 0; c0 < n_pos; c0 += kChunk) {
        const int64_t valid = std::min(kChunk, n_pos - c0);
        float chunk_max = -INFINITY;
        for (int64_t j = 0; j < valid; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d)
            dot += static_cast<double>(bf(q[d] * task.scale)) * bf(LoadK(task.kv, c0 + j, d));
          s[j] = static_cast<float>(dot);
          chunk_max = std::max(chunk_max, s[j]);
        }
        if (chunk_max > run_max) {
          const float correction = std::exp(run_max - chunk_max);
          for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
          sum *= correction;
          run_max = chunk_max;
        }
        for (int64_t j = 0; j < valid; ++j) {
          const float p = std::exp(s[j] - run_max);
          sum += p;
          const float pb = bf(p);
          for (int64_t d = 0; d < hd; ++d) acc[d] += pb * bf(LoadV(task.kv, c0 + j, d));
        }
      }
      for (int64_t d = 0; d < hd; ++d) out[d] = acc[d] / sum;
    }
  }
}

uint64_t StreamRead(const uint8_t* data, size_t n_bytes) {
  uint64_t acc[8] = {};
  const uint64_t* p = reinterpret_cast<const uint64_t*>(data);
  for (size_t i = 0; i < n_bytes / 8; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] ^= p[i + j];
  }
  return acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

double Int8Peak(double seconds) {
  // Scalar multiply-adds over 8 independent chains.
  int32_t acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t a = 3, b = -2;
  uint64_t macs = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 16; ++it) {
      for (int j = 0; j < 8; ++j) acc[j] = acc[j] * a + b;
    }
    macs += 8u << 16;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  volatile int32_t sink = acc[0] + acc[7];
  (void)sink;
  return static_cast<double>(macs) / elapsed;
}

#include "kernels/lora_expand.inc"

}  // namespace reference

std::string_view KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF32:
      return "f32";
    case KvType::kF16:
      return "f16";
    case KvType::kQ8:
      return "q8";
  }
  return "?";
}

bool ParseKvType(std::string_view name, KvType* out) {
  if (name == "f32")
    *out = KvType::kF32;
  else if (name == "f16")
    *out = KvType::kF16;
  else if (name == "q8" || name == "int8")
    *out = KvType::kQ8;
  else
    return false;
  return true;
}

size_t KvElementBytes(KvType type) {
  return type == KvType::kF32 ? 4 : type == KvType::kF16 ? 2 : 1;
}

const KernelTable& ReferenceKernels() {
  static const KernelTable kTable = {
      .name = "reference",
      .quantize_rows = reference::QuantizeRows,
      .packed_gemm = reference::PackedGemm,
      // The oracle forward keeps the exact per-group path for every batch size;
      // reference::PrefillGemm is the ground truth of tables that set prefill_gemm.
      .prefill_gemm = nullptr,
      .dense_gemm = reference::DenseGemm,
      .lora_expand = reference::LoraExpandImpl,
      .rmsnorm = reference::Rmsnorm,
      .rope = reference::Rope,
      .silu_mul = reference::SiluMul,
      .kv_store = reference::KvStore,
      .attention = reference::Attention,
      .stream_read = reference::StreamRead,
      .int8_peak = reference::Int8Peak,
      .log_sum_exp = reference::LogSumExp,
  };
  return kTable;
}

}  // namespace pocket
