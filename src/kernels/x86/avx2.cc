// AVX2 kernels (with FMA and F16C), for Haswell-class CPUs without AVX-512 or AVX-VNNI.
// Bit-identical to the reference for quantize_rows, packed_gemm (store / accumulate), dense_gemm,
// rmsnorm, rope and kv_store: the same operations in the same order, with the canonical 16
// partial sums held in two 8-lane registers (reference/canonical.h). This file is compiled with
// -mavx2 -mfma -mf16c and only called when the CPU has them: it defines everything it uses itself
// (no shared inline code, whose AVX2 copy the linker could pick for baseline callers).
// The packed matmul is in avx2_packed.cc, attention and the KV cache in avx2_attention.cc.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/tables.h"
#include "kernels/x86/avx2_common.h"
#include "quant/quantize.h"

namespace pocket {
namespace avx2 {
namespace {

// ---- activations --------------------------------------------------------------------------

inline __m256 Abs(__m256 v) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

// 8 activations at column c, RMS-normalized ((x * inv_rms) * weight, as the reference) when
// norm_weight is given.
inline __m256 Source(const float* row, const float* norm_weight, __m256 inv_rms, int64_t c) {
  const __m256 v = _mm256_loadu_ps(row + c);
  if (norm_weight == nullptr) return v;
  return _mm256_mul_ps(_mm256_mul_ps(v, inv_rms), _mm256_loadu_ps(norm_weight + c));
}

void QuantizeRows(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                  const float* norm_weight, float eps, QuantizedRows* out) {
  const int32_t group = out->group;  // a multiple of 32 (PackedLayout::Validate)
  const int64_t n_groups = cols / group;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = x + t * ldx;
    __m256 inv_rms = _mm256_set1_ps(1.0f);
    if (norm_weight != nullptr) {
      const float mean = SumOfSquares(row, cols) / static_cast<float>(cols);
      inv_rms = _mm256_set1_ps(1.0f / Sqrt(mean + eps));
    }
    int8_t* q_row = out->q + t * cols;
    for (int64_t g = 0; g < n_groups; ++g) {
      const int64_t c0 = g * group;
      // Pass 1: the group's absolute maximum (normalizing on the fly).
      __m256 vmax = _mm256_setzero_ps();
      for (int64_t c = c0; c < c0 + group; c += 8)
        vmax = _mm256_max_ps(vmax, Abs(Source(row, norm_weight, inv_rms, c)));
      const float amax = HorizontalMax(vmax);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      out->scale[t * n_groups + g] = amax / 127.0f;
      const __m256 vinv = _mm256_set1_ps(inv);
      __m256i vsum = _mm256_setzero_si256();
      for (int64_t c = c0; c < c0 + group; c += 32) {
        const __m256i q0 = QuantizeLanes(Source(row, norm_weight, inv_rms, c), vinv);
        const __m256i q1 = QuantizeLanes(Source(row, norm_weight, inv_rms, c + 8), vinv);
        const __m256i q2 = QuantizeLanes(Source(row, norm_weight, inv_rms, c + 16), vinv);
        const __m256i q3 = QuantizeLanes(Source(row, norm_weight, inv_rms, c + 24), vinv);
        vsum = _mm256_add_epi32(
            vsum, _mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q_row + c), PackToInt8(q0, q1, q2, q3));
      }
      out->sum[t * n_groups + g] = static_cast<float>(HorizontalAddInt(vsum));
    }
  }
}

// ---- dense float matmul -----------------------------------------------------------------------

// 8 fp16 / bf16 values (n < 8: the first n, zeros after) as floats.
inline __m256 HalfToFloat(const uint8_t* src, int64_t n, bool bf16) {
  __m128i h;
  if (n >= 8) {
    h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  } else {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, src, static_cast<size_t>(n) * 2);
    h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
  }
  if (!bf16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Row r as floats: f32 in place, f16 / bf16 converted 8 at a time, block types via the reference
// dequantizer (exact either way).
inline const float* RowAsFloat(const WeightMatrix& w, int64_t r, float* scratch) {
  const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
  switch (w.type) {
    case DType::kF32:
      return reinterpret_cast<const float*>(src);
    case DType::kF16:
    case DType::kBF16: {
      const bool bf16 = w.type == DType::kBF16;
      for (int64_t i = 0; i < w.cols; i += 8)
        StoreN(scratch + i, w.cols - i, HalfToFloat(src + 2 * i, w.cols - i, bf16));
      return scratch;
    }
    default:
      DequantizeRow(w.type, src, scratch, w.cols);
      return scratch;
  }
}

void DenseGemm(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
               int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch) {
  const int64_t n = w.cols;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = RowAsFloat(w, r, scratch);
    int64_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) {
      __m256 lo[4], hi[4];
      for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
      const float* xt = x + t * ldx;
      int64_t i = 0;
      for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(row + i), w1 = _mm256_loadu_ps(row + i + 8);
        for (int j = 0; j < 4; ++j) {
          lo[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt + j * ldx + i), lo[j]);
          hi[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + j * ldx + i + 8), hi[j]);
        }
      }
      if (i < n) {
        const __m256 w0 = LoadN(row + i, n - i), w1 = LoadN(row + i + 8, n - i - 8);
        for (int j = 0; j < 4; ++j) {
          lo[j] = _mm256_fmadd_ps(w0, LoadN(xt + j * ldx + i, n - i), lo[j]);
          hi[j] = _mm256_fmadd_ps(w1, LoadN(xt + j * ldx + i + 8, n - i - 8), hi[j]);
        }
      }
      for (int j = 0; j < 4; ++j) StoreScalar(out, t + j, r, CanonicalReduce(lo[j], hi[j]));
    }
    for (; t < n_tokens; ++t) StoreScalar(out, t, r, CanonicalDot(row, x + t * ldx, n));
  }
}

// ---- small operations -------------------------------------------------------------------------

void Rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const float mean = SumOfSquares(x, n) / static_cast<float>(n);
  const __m256 inv = _mm256_set1_ps(1.0f / Sqrt(mean + eps));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_mul_ps(LoadN(x + i, n - i), inv);
    StoreN(y + i, n - i, _mm256_mul_ps(v, LoadN(weight + i, n - i)));
  }
}

void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
          bool interleaved) {
  const int64_t half = head_dim / 2;
  // Separate multiplies, then the subtraction / addition, as the reference (no fused multiply-add).
  if (interleaved && half % 4 == 0) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      for (int64_t i = 0; i < half; i += 4) {
        const __m128 c = _mm_loadu_ps(cos + i), s = _mm_loadu_ps(sin + i);
        // Each pair's cos / sin twice: [c0 c0 c1 c1 c2 c2 c3 c3].
        const __m256 cc = _mm256_set_m128(_mm_unpackhi_ps(c, c), _mm_unpacklo_ps(c, c));
        const __m256 ss = _mm256_set_m128(_mm_unpackhi_ps(s, s), _mm_unpacklo_ps(s, s));
        const __m256 xv = _mm256_loadu_ps(v + 2 * i);
        const __m256 swapped = _mm256_permute_ps(xv, 0xb1);  // (x1, x0) per pair
        // Even lanes: x0 c - x1 s; odd lanes: x1 c + x0 s.
        _mm256_storeu_ps(v + 2 * i,
                         _mm256_addsub_ps(_mm256_mul_ps(xv, cc), _mm256_mul_ps(swapped, ss)));
      }
    }
    return;
  }
  if (interleaved || half % 8 != 0) {
    reference::Rope(x, n_heads, head_dim, cos, sin, interleaved);
    return;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; i += 8) {
      const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
      const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
      _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
      _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x0, s)));
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 g = LoadN(gate + i, n - i);
    StoreN(out + i, n - i, _mm256_mul_ps(Silu(g), LoadN(up + i, n - i)));
  }
}

// ---- machine ceilings ---------------------------------------------------------------------------

uint64_t StreamRead(const uint8_t* data, size_t n_bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= n_bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i)));
    a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 96)));
  }
  if (i + 64 <= n_bytes) {
    a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i)));
    a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 32)));
  }
  const __m256i v = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  const __m128i h = _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(h)) ^
         static_cast<uint64_t>(_mm_extract_epi64(h, 1));
}

// Two halves at once, each with software prefetch 4 KB ahead as the AVX2 decode kernel does
// (prefetches past the end never fault).
uint64_t StreamReadPrefetched(const uint8_t* data, size_t n_bytes) {
  constexpr size_t kAhead = 4096;
  const size_t half = n_bytes / 128 * 64;  // bytes of each stream, a multiple of 64
  const uint8_t* second = data + half;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < half; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(data + i + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(second + i + kAhead), _MM_HINT_T0);
    a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i)));
    a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(second + i)));
    a3 =
        _mm256_xor_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(second + i + 32)));
  }
  if (2 * half + 64 <= n_bytes) {  // the tail: one line
    a0 =
        _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + 2 * half)));
    a1 = _mm256_xor_si256(
        a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + 2 * half + 32)));
  }
  const __m256i v = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  const __m128i h = _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(h)) ^
         static_cast<uint64_t>(_mm_extract_epi64(h, 1));
}

double Int8Peak(double seconds) {
  // The packed matmul's inner step: VPMADDUBSW (32 byte products, pairwise int16 sums), VPMADDWD
  // with ones (int32 sums), VPADDD into an accumulator. Eight independent chains in named
  // registers; the operand `a` is made opaque to the compiler before every step (an empty asm
  // that "changes" it, no instruction), so no product is hoisted, shared or folded.
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  __asm__ volatile("" : "+x"(a), "+x"(b), "+x"(ones));
  __m256i c0 = a, c1 = a, c2 = a, c3 = a, c4 = a, c5 = a, c6 = a, c7 = a;
#define POCKET_AVX2_STEP(c)                                                     \
  c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones)); \
  __asm__ volatile("" : "+x"(a))
  uint64_t macs = 0;
  const int64_t start = NowNanos();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 14; ++it) {
      POCKET_AVX2_STEP(c0);
      POCKET_AVX2_STEP(c1);
      POCKET_AVX2_STEP(c2);
      POCKET_AVX2_STEP(c3);
      POCKET_AVX2_STEP(c4);
      POCKET_AVX2_STEP(c5);
      POCKET_AVX2_STEP(c6);
      POCKET_AVX2_STEP(c7);
      __asm__ volatile(""
                       : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6),
                         "+x"(c7));
    }
    macs += uint64_t{8} * 32 * (1u << 14);
    elapsed = static_cast<double>(NowNanos() - start) * 1e-9;
  }
#undef POCKET_AVX2_STEP
  // Keep the accumulators alive (their values are meaningless).
  const __m256i all =
      _mm256_xor_si256(_mm256_xor_si256(_mm256_xor_si256(c0, c1), _mm256_xor_si256(c2, c3)),
                       _mm256_xor_si256(_mm256_xor_si256(c4, c5), _mm256_xor_si256(c6, c7)));
  __asm__ volatile("" : : "x"(all));
  return static_cast<double>(macs) / elapsed;
}

#include "kernels/lora_expand.inc"

}  // namespace
}  // namespace avx2

const KernelTable& Avx2Kernels() {
  static const KernelTable kTable = {
      .name = "avx2",
      .quantize_rows = avx2::QuantizeRows,
      .packed_gemm = avx2::PackedGemm,
      .prefill_gemm = nullptr,
      .dense_gemm = avx2::DenseGemm,
      .lora_expand = avx2::LoraExpandImpl,
      .rmsnorm = avx2::Rmsnorm,
      .rope = avx2::Rope,
      .silu_mul = avx2::SiluMul,
      .kv_store = avx2::KvStore,
      .attention = avx2::Attention,
      .stream_read = avx2::StreamRead,
      .stream_read_prefetched = avx2::StreamReadPrefetched,
      .int8_peak = avx2::Int8Peak,
  };
  return kTable;
}

}  // namespace pocket
