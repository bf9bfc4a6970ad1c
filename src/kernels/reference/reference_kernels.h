// The reference kernels by name, for fast tables that reuse some of them (and for tests).
#pragma once

#include "kernels/kernel_table.h"

namespace pocket::reference {

void Rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y);
void QuantizeGroup(const float* x, int32_t n, int8_t* q, float* scale, float* sum);
void QuantizeRows(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                  const float* norm_weight, float eps, QuantizedRows* out);
void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out);
void PrefillGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                 int64_t panel_end, const GemmOut& out);
void DenseGemm(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
               int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch);
void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
          bool interleaved);
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
double LogSumExp(const float* x, int64_t n);
void KvStore(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
             const float* v, int64_t ldv);
void Attention(const AttentionTask& task, float* scratch);
// The definition of KernelTable::prefill_attention (bf16 operands, chunks of 32 positions).
void PrefillAttentionBf16(const AttentionTask& task, float* scratch);
float Silu(float x);
uint64_t StreamRead(const uint8_t* data, size_t n_bytes);
double Int8Peak(double seconds);

}  // namespace pocket::reference
