// AMX-INT8 kernels for prefill (many tokens): the packed matmul on 16x16 int32 tiles, bit-identical
// to the reference (each tile's integer sums are exactly the per-group dot products; the float
// epilogue is the same as the AVX-512 kernel's), and, with AMX-BF16, the prefill attention over an
// f16 KV cache (bf16 tiles, fp32 scores and sums). Everything else is the AVX-512 table. Compiled
// with AMX and AVX-512 flags; used only when the CPU has AMX and the kernel granted tile data.
#include <immintrin.h>

#include <math.h>  // expf: std::exp would leave a weak AVX-512 copy in debug builds
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/tables.h"
#include "kernels/x86/avx512_common.h"

namespace pocket {
namespace amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tiles: 0-3 accumulators C[token block][panel] (16 x 16 int32), 4-5 activations A (16 tokens x
// k_step bytes), 6-7 weights B (k_step / 4 quads x 16 rows x 4 bytes: the packed vector layout).
void Configure(int32_t k_step) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 4; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  for (int t = 4; t < 6; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = static_cast<uint16_t>(k_step);
  }
  for (int t = 6; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(k_step / 4);
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

inline __m512 AccumulateGroup(__m512 acc, __m512i iacc, __m512 d, __m512 m, float s, float sum) {
  const __m512 v =
      _mm512_fmadd_ps(m, _mm512_set1_ps(sum), _mm512_mul_ps(d, _mm512_cvtepi32_ps(iacc)));
  return _mm512_fmadd_ps(_mm512_set1_ps(s), v, acc);
}

constexpr int64_t kMaxCols = 16384;  // unpacked weights of a panel pair live on the stack

// All eight tiles 16 rows x 64 bytes: accumulators 0-3, activations 4-5, weights 6-7.
void ConfigureSquare() {
  Configure(64);
}

}  // namespace

void PackedGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                int64_t panel_end, const GemmOut& out) {
  const PackedLayout& l = w.layout;
  const bool u4 = l.codes == PackedCodes::kU4;
  const int32_t group = l.group;
  const int64_t cols = l.cols;
  const int64_t full_tokens = a.n_tokens / 32 * 32;
  if (full_tokens == 0 || cols > kMaxCols || (group != 32 && group % 64 != 0)) {
    avx512::PackedGemm(w, a, panel_begin, panel_end, out);
    return;
  }
  const int64_t n_groups = cols / group;
  const int32_t k_step = group < 64 ? group : 64;
  const int32_t steps = group / k_step;
  const size_t code_bytes = static_cast<size_t>(group) * 16 * (u4 ? 4 : 8) / 8;
  const size_t group_bytes = code_bytes + (l.explicit_min ? 64 : 32);
  const size_t panel_bytes = group_bytes * static_cast<size_t>(n_groups);
  const float neg_zero = u4 ? -8.0f : -128.0f;
  const int64_t rows = l.rows;
  const bool swiglu = out.epilogue == Epilogue::kSwiGlu;

  Configure(k_step);
  // Weights of two panels as int8 tiles: [panel][group][16 * group bytes].
  alignas(64) uint8_t unpacked[2 * kMaxCols * 16];
  alignas(64) int32_t c[2][4][16][16];  // two groups' tiles (double-buffered)
  alignas(64) float acc[32][2][16];
  const __m512i nib = _mm512_set1_epi8(0x0f);

  for (int64_t p = panel_begin; p < panel_end; p += 2) {
    const int n_panels = p + 1 < panel_end ? 2 : 1;
    const uint8_t* panel[2] = {w.data + static_cast<size_t>(p) * panel_bytes,
                               w.data + static_cast<size_t>(p + n_panels - 1) * panel_bytes};
    const uint8_t* b_tiles[2];  // per panel: group g at + g * 16 * group
    for (int j = 0; j < n_panels; ++j) {
      if (!u4) {
        b_tiles[j] = nullptr;  // u8 codes are already tile rows (stride 64) in place
        continue;
      }
      uint8_t* dst = unpacked + static_cast<size_t>(j) * kMaxCols * 16;
      for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* src = panel[j] + static_cast<size_t>(g) * group_bytes;
        uint8_t* d = dst + static_cast<size_t>(g) * 16 * group;
        const int32_t half = group / 8;  // vector i: quads i (low nibbles) and i + half (high)
        for (int32_t i = 0; i < half; ++i) {
          const __m512i v = _mm512_loadu_si512(src + 64 * i);
          _mm512_store_si512(d + 64 * i, _mm512_and_si512(v, nib));
          _mm512_store_si512(d + 64 * (i + half), _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
        }
      }
      b_tiles[j] = dst;
    }
    // Group g's tiles are computed while group g - 1's integer sums get their float epilogue on
    // the vector units (software pipelining: the AMX unit and the AVX-512 units overlap).
    auto issue = [&](int64_t t0, int64_t g) {
      for (int32_t s = 0; s < steps; ++s) {
        const int8_t* a0 = a.q + t0 * cols + g * group + s * k_step;
        _tile_loadd(4, a0, cols);
        _tile_loadd(5, a0 + 16 * cols, cols);
        const size_t off0 =
            static_cast<size_t>(g) * 16 * group + static_cast<size_t>(s) * 16 * k_step;
        const size_t off1 =
            static_cast<size_t>(g) * group_bytes + static_cast<size_t>(s) * 16 * k_step;
        const int j1 = n_panels > 1 ? 1 : 0;
        _tile_loadd(6, u4 ? b_tiles[0] + off0 : panel[0] + off1, 64);
        _tile_loadd(7, u4 ? b_tiles[j1] + off0 : panel[j1] + off1, 64);
        if (s == 0) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        }
        _tile_dpbsud(0, 4, 6);  // tokens 0-15, panel 0
        _tile_dpbsud(1, 4, 7);  // tokens 0-15, panel 1
        _tile_dpbsud(2, 5, 6);  // tokens 16-31, panel 0
        _tile_dpbsud(3, 5, 7);  // tokens 16-31, panel 1
      }
    };
    auto store = [&](int buf) {
      _tile_stored(0, c[buf][0], 64);
      _tile_stored(1, c[buf][1], 64);
      _tile_stored(2, c[buf][2], 64);
      _tile_stored(3, c[buf][3], 64);
    };
    for (int64_t t0 = 0; t0 < full_tokens; t0 += 32) {
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 2; ++j) _mm512_store_ps(acc[i][j], _mm512_setzero_ps());
      const float* scale = a.scale + t0 * n_groups;
      const float* sum = a.sum + t0 * n_groups;
      issue(t0, 0);
      store(0);
      for (int64_t g = 0; g < n_groups; ++g) {
        const int buf = static_cast<int>(g & 1);
        if (g + 1 < n_groups) issue(t0, g + 1);
        for (int j = 0; j < n_panels; ++j) {
          const uint8_t* scales = panel[j] + static_cast<size_t>(g) * group_bytes + code_bytes;
          const __m512 d =
              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
          const __m512 m = l.explicit_min ? _mm512_cvtph_ps(_mm256_loadu_si256(
                                                reinterpret_cast<const __m256i*>(scales + 32)))
                                          : _mm512_mul_ps(_mm512_set1_ps(neg_zero), d);
          for (int i = 0; i < 32; ++i) {
            const int64_t idx = i * n_groups + g;
            const __m512i iacc = _mm512_load_si512(c[buf][(i / 16) * 2 + j][i % 16]);
            _mm512_store_ps(acc[i][j], AccumulateGroup(_mm512_load_ps(acc[i][j]), iacc, d, m,
                                                       scale[idx], sum[idx]));
          }
        }
        if (g + 1 < n_groups) store(buf ^ 1);
      }
      for (int i = 0; i < 32; ++i) {
        const int64_t t = t0 + i;
        if (swiglu) {
          avx512::StoreSwiGlu(out, rows, t, (p / 2) * 16, _mm512_load_ps(acc[i][0]),
                              _mm512_load_ps(acc[i][1]));
          continue;
        }
        for (int j = 0; j < n_panels; ++j)
          avx512::StorePanel(out, t, (p + j) * 16, rows, _mm512_load_ps(acc[i][j]));
      }
    }
  }
  _tile_release();
  if (full_tokens < a.n_tokens) {  // the last tokens (fewer than a block) with VNNI
    QuantizedRows rest = a;
    rest.q += full_tokens * cols;
    rest.scale += full_tokens * n_groups;
    rest.sum += full_tokens * n_groups;
    rest.n_tokens = a.n_tokens - full_tokens;
    GemmOut o = out;
    o.y += full_tokens * out.ld;
    if (o.add != nullptr) o.add += full_tokens * out.ld_add;
    avx512::PackedGemm(w, rest, panel_begin, panel_end, o);
  }
}

// ---- prefill: weights requantized per block, integer sums over whole blocks -------------------

namespace {

// Expands a per-row vector (16 rows) to the quad layout of rows 4q..4q+3 (each value 4 times).
inline __m512 ExpandRows(__m512 v, int q) {
  const __m512i idx = _mm512_set_epi32(4 * q + 3, 4 * q + 3, 4 * q + 3, 4 * q + 3, 4 * q + 2,
                                       4 * q + 2, 4 * q + 2, 4 * q + 2, 4 * q + 1, 4 * q + 1,
                                       4 * q + 1, 4 * q + 1, 4 * q, 4 * q, 4 * q, 4 * q);
  return _mm512_permutexvar_ps(idx, v);
}

// The int8 codes of one quad vector (16 rows x 4 columns) of a packed group.
inline __m512i QuadCodes(const uint8_t* group, bool u4, int32_t group_cols, int32_t quad) {
  if (!u4) return _mm512_loadu_si512(group + 64 * quad);
  const int32_t half = group_cols / 8;
  const __m512i v = _mm512_loadu_si512(group + 64 * (quad % half));
  const __m512i nib = _mm512_set1_epi8(0x0f);
  return quad < half ? _mm512_and_si512(v, nib) : _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
}

struct PanelGeom {
  bool u4, explicit_min;
  int32_t group;
  int64_t n_groups;
  size_t code_bytes, group_bytes, panel_bytes;
};

// Requantizes one panel to int8 tile rows (quad vectors: [cols / 4][16 rows x 4 bytes]) and per
// row scales D, from each group's (d, m) as kernel_table.h defines.
void RequantizePanel(const PanelGeom& g, const uint8_t* panel, int64_t cols, int8_t* tiles,
                     float* scales /* [16] */) {
  const __m512 c_max = _mm512_set1_ps(g.u4 ? 15.0f : 255.0f);
  const __m512 neg_zero = _mm512_set1_ps(g.u4 ? -8.0f : -128.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  auto scales_of = [&](int64_t gi, __m512* d, __m512* m) {
    const uint8_t* s = panel + static_cast<size_t>(gi) * g.group_bytes + g.code_bytes;
    *d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    *m = g.explicit_min
             ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)))
             : _mm512_mul_ps(neg_zero, *d);
  };
  const int64_t n_groups = cols / g.group;
  __m512 amax = _mm512_setzero_ps();
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    __m512 d, m;
    scales_of(gi, &d, &m);
    amax = _mm512_max_ps(
        amax,
        _mm512_max_ps(_mm512_abs_ps(m), _mm512_abs_ps(_mm512_add_ps(_mm512_mul_ps(d, c_max), m))));
  }
  const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __m512 inv = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.0f), amax);
  _mm512_store_ps(scales, _mm512_div_ps(amax, _mm512_set1_ps(127.0f)));
  {
    for (int64_t gi = 0; gi < n_groups; ++gi) {
      __m512 d, m;
      scales_of(gi, &d, &m);
      const __m512 alpha = _mm512_mul_ps(d, inv), beta = _mm512_mul_ps(m, inv);
      const uint8_t* grp = panel + static_cast<size_t>(gi) * g.group_bytes;
      int8_t* dst = tiles + gi * g.group * 16;
      if (g.u4) {
        // Sixteen codes per row: a table of every row's 16 requantized values (computed as the
        // reference computes each weight), then every code vector is looked up with byte permutes
        // (VPERMI2B: 8 rows x 16 codes per register pair).
        alignas(64) float a_rows[16], b_rows[16];
        _mm512_store_ps(a_rows, alpha);
        _mm512_store_ps(b_rows, beta);
        alignas(64) int8_t lut[256];
        const __m512 codes_f = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        for (int r = 0; r < 16; ++r) {
          __m512i qv = _mm512_cvtps_epi32(_mm512_add_ps(
              _mm512_mul_ps(_mm512_set1_ps(a_rows[r]), codes_f), _mm512_set1_ps(b_rows[r])));
          qv = _mm512_min_epi32(_mm512_max_epi32(qv, lo), hi);
          _mm_store_si128(reinterpret_cast<__m128i*>(lut + 16 * r), _mm512_cvtepi32_epi8(qv));
        }
        const __m512i t0 = _mm512_load_si512(lut), t1 = _mm512_load_si512(lut + 64);
        const __m512i t2 = _mm512_load_si512(lut + 128), t3 = _mm512_load_si512(lut + 192);
        // Byte 4r + j of a code vector belongs to row r: table offset (r % 8) * 16.
        const __m512i row_off = _mm512_set_epi32(
            0x70707070, 0x60606060, 0x50505050, 0x40404040, 0x30303030, 0x20202020, 0x10101010, 0,
            0x70707070, 0x60606060, 0x50505050, 0x40404040, 0x30303030, 0x20202020, 0x10101010, 0);
        const __m512i nib = _mm512_set1_epi8(0x0f);
        auto lookup = [&](__m512i codes) {
          const __m512i idx = _mm512_or_si512(codes, row_off);
          const __m512i rows0_7 = _mm512_permutex2var_epi8(t0, idx, t1);
          const __m512i rows8_15 = _mm512_permutex2var_epi8(t2, idx, t3);
          return _mm512_mask_blend_epi8(0xffffffff00000000ull, rows0_7, rows8_15);
        };
        const int32_t half = g.group / 8;
        for (int32_t i = 0; i < half; ++i) {
          const __m512i v = _mm512_loadu_si512(grp + 64 * i);
          _mm512_store_si512(dst + 64 * i, lookup(_mm512_and_si512(v, nib)));
          _mm512_store_si512(dst + 64 * (i + half),
                             lookup(_mm512_and_si512(_mm512_srli_epi16(v, 4), nib)));
        }
        continue;
      }
      __m512 ea[4], eb[4];
      for (int q = 0; q < 4; ++q) {
        ea[q] = ExpandRows(alpha, q);
        eb[q] = ExpandRows(beta, q);
      }
      for (int32_t qi = 0; qi < g.group / 4; ++qi) {
        const __m512i codes = QuadCodes(grp, g.u4, g.group, qi);
        for (int q = 0; q < 4; ++q) {
          const __m128i part = q == 0   ? _mm512_extracti32x4_epi32(codes, 0)
                               : q == 1 ? _mm512_extracti32x4_epi32(codes, 1)
                               : q == 2 ? _mm512_extracti32x4_epi32(codes, 2)
                                        : _mm512_extracti32x4_epi32(codes, 3);
          const __m512 cf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(part));
          // a * code + b: a multiply then an add, as the reference.
          __m512i qv = _mm512_cvtps_epi32(_mm512_add_ps(_mm512_mul_ps(ea[q], cf), eb[q]));
          qv = _mm512_min_epi32(_mm512_max_epi32(qv, lo), hi);
          _mm_store_si128(reinterpret_cast<__m128i*>(dst + 64 * qi + 16 * q),
                          _mm512_cvtepi32_epi8(qv));
        }
      }
    }
  }
}

}  // namespace

void PrefillGemm(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                 int64_t panel_end, const GemmOut& out) {
  const PackedLayout& l = w.layout;
  const int64_t cols = l.cols;
  const int32_t block = a.group;
  const int64_t n_blocks = cols / block;
  const int64_t full_tokens = a.n_tokens / 32 * 32;
  PanelGeom g;
  g.u4 = l.codes == PackedCodes::kU4;
  g.explicit_min = l.explicit_min;
  g.group = l.group;
  g.n_groups = cols / l.group;
  g.code_bytes = static_cast<size_t>(l.group) * 16 * (g.u4 ? 4 : 8) / 8;
  g.group_bytes = g.code_bytes + (l.explicit_min ? 64 : 32);
  g.panel_bytes = g.group_bytes * static_cast<size_t>(g.n_groups);
  if (cols > kMaxCols || block > 1024 || block % 64 != 0) {
    reference::PrefillGemm(w, a, panel_begin, panel_end, out);  // not reached by the forward
    return;
  }
  const int64_t rows = l.rows;
  const bool swiglu = out.epilogue == Epilogue::kSwiGlu;
  alignas(64) int8_t tiles[2][kMaxCols * 16];
  alignas(64) float scales[2][16];
  alignas(64) int32_t c[2][4][16][16];  // two blocks' integer sums (double-buffered)
  alignas(64) float acc[32][2][16];
  ConfigureSquare();
  // One block's tile products for tokens t0..t0+31 and both panels, into tiles 0-3.
  auto issue = [&](const int8_t* q, int64_t t0, int64_t b) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t k = b * block; k < (b + 1) * block; k += 64) {
      // Activation tiles straight from the quantized rows (row stride: the column count); packing
      // them contiguously first measured no faster.
      _tile_loadd(4, q + t0 * cols + k, cols);
      _tile_loadd(6, tiles[0] + k * 16, 64);
      _tile_dpbssd(0, 4, 6);
      _tile_loadd(7, tiles[1] + k * 16, 64);
      _tile_dpbssd(1, 4, 7);
      _tile_loadd(5, q + (t0 + 16) * cols + k, cols);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  };
  auto store = [&](int buf) {
    _tile_stored(0, c[buf][0], 64);
    _tile_stored(1, c[buf][1], 64);
    _tile_stored(2, c[buf][2], 64);
    _tile_stored(3, c[buf][3], 64);
  };
  // The tokens past the last whole block of 32 run on the tiles too, from a zero-padded copy of
  // their activation rows (the padding rows' results are dropped): a plain VNNI loop over the
  // requantized weights made an 80-token prompt slower than a 64-token one.
  const int64_t n_tail = a.n_tokens - full_tokens;
  // Plain arrays, zeroed with memset: a std::vector<float> here would instantiate weak template
  // copies (fill, construct) compiled with this file's AVX-512 flags, which the linker may pick
  // for baseline callers (tests/isa: isa.kernel_objects).
  std::unique_ptr<int8_t[]> tail_q;
  std::unique_ptr<float[]> tail_scale;
  if (n_tail > 0) {
    tail_q.reset(new int8_t[static_cast<size_t>(32 * cols)]);
    tail_scale.reset(new float[static_cast<size_t>(32 * n_blocks)]);
    std::memset(tail_q.get(), 0, static_cast<size_t>(32 * cols));
    std::memset(tail_scale.get(), 0, static_cast<size_t>(32 * n_blocks) * sizeof(float));
    std::memcpy(tail_q.get(), a.q + full_tokens * cols, static_cast<size_t>(n_tail * cols));
    std::memcpy(tail_scale.get(), a.scale + full_tokens * n_blocks,
                static_cast<size_t>(n_tail * n_blocks) * sizeof(float));
  }
  for (int64_t p = panel_begin; p < panel_end; p += 2) {
    const int n_panels = p + 1 < panel_end ? 2 : 1;
    for (int j = 0; j < n_panels; ++j) {
      RequantizePanel(g, w.data + static_cast<size_t>(p + j) * g.panel_bytes, cols, tiles[j],
                      scales[j]);
    }
    if (n_panels == 1) {
      std::memset(tiles[1], 0, static_cast<size_t>(cols) * 16);
      std::memset(scales[1], 0, sizeof(scales[1]));
    }
    const __m512 d_rows[2] = {_mm512_load_ps(scales[0]), _mm512_load_ps(scales[1])};
    // Tokens [t0, t0 + 32 * n_steps / n_blocks) of activation rows q (scales `scale`), stored
    // to output rows t_out0 + t for t < n_valid.
    auto run = [&](const int8_t* q, const float* scale, int64_t n_steps, int64_t t_out0,
                   int64_t n_valid) {
      // Steps (token block t0, column block b) in order; step s + 1's tile products run on the AMX
      // unit while step s's integer sums get their float epilogue on the vector units.
      if (n_steps > 0) {
        issue(q, 0, 0);
        store(0);
      }
      for (int64_t step = 0; step < n_steps; ++step) {
        const int buf = static_cast<int>(step & 1);
        const int64_t t0 = step / n_blocks * 32, b = step % n_blocks;
        if (step + 1 < n_steps) issue(q, (step + 1) / n_blocks * 32, (step + 1) % n_blocks);
        for (int i = 0; i < 32; ++i) {
          const __m512 s_tb = _mm512_set1_ps(scale[(t0 + i) * n_blocks + b]);
          for (int j = 0; j < 2; ++j) {
            const __m512 ci =
                _mm512_cvtepi32_ps(_mm512_load_si512(c[buf][(i / 16) * 2 + j][i % 16]));
            // The first block starts the sum (ci * s + 0 rounds as ci * s).
            _mm512_store_ps(acc[i][j], b == 0
                                           ? _mm512_mul_ps(ci, s_tb)
                                           : _mm512_fmadd_ps(ci, s_tb, _mm512_load_ps(acc[i][j])));
          }
        }
        if (step + 1 < n_steps) store(buf ^ 1);
        if (b + 1 < n_blocks) continue;
        for (int i = 0; i < 32 && t0 + i < n_valid; ++i) {
          const int64_t t = t_out0 + t0 + i;
          const __m512 gate = _mm512_mul_ps(_mm512_load_ps(acc[i][0]), d_rows[0]);
          if (swiglu) {
            avx512::StoreSwiGlu(out, rows, t, (p / 2) * 16, gate,
                                _mm512_mul_ps(_mm512_load_ps(acc[i][1]), d_rows[1]));
            continue;
          }
          for (int j = 0; j < n_panels; ++j) {
            avx512::StorePanel(out, t, (p + j) * 16, rows,
                               j == 0 ? gate : _mm512_mul_ps(_mm512_load_ps(acc[i][j]), d_rows[j]));
          }
        }
      }
    };
    run(a.q, a.scale, full_tokens / 32 * n_blocks, 0, full_tokens);
    if (n_tail > 0) run(tail_q.get(), tail_scale.get(), n_blocks, full_tokens, n_tail);
  }
  _tile_release();
}

// ---- prefill attention on bf16 tiles ----------------------------------------------------------

namespace {

// Row `i` of the word permutation that interleaves two rows of 16 bf16 values (a, b) into pairs
// (a0, b0, a1, b1, ...): the operand layout of TDPBF16PS's B tile.
inline __m512i PairInterleave() {
  alignas(64) uint16_t idx[32];
  for (int n = 0; n < 16; ++n) {
    idx[2 * n] = static_cast<uint16_t>(n);
    idx[2 * n + 1] = static_cast<uint16_t>(16 + n);
  }
  return _mm512_load_si512(idx);
}

// 32 bf16 of two float rows (a first), as a 64-byte tile row.
inline __m512i ToBf16Row(__m512 a, __m512 b) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
}

// Row d of a K block (16 positions; `kb` from KvHeadView::KeyBlock, computed once per block: the
// tile stores below may alias the view's page table, so addresses are not recomputed per row).
template <KvType kType>
inline __m512 KRow(const KvElement<kType>* kb, int64_t d) {
  const KvElement<kType>* k = kb + d * kKvBlockPositions;
  if constexpr (kType == KvType::kF32) {
    return _mm512_loadu_ps(k);
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k)));
  }
}

// 16 values of a V row (`row` from KvHeadView::ValueRow) from column c, as floats.
template <KvType kType>
inline __m512 VRow16(const KvElement<kType>* row, int64_t c) {
  const KvElement<kType>* v = row + c;
  if constexpr (kType == KvType::kF32) {
    return _mm512_loadu_ps(v);
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)));
  }
}

inline uint8_t* AlignUp(void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>((v + 63) / 64 * 64);
}

// One task of exactly 16 query tokens. Tiles (all 16 rows x 64 bytes): 0-1 results, 2 the A
// operand (queries or probabilities), 3-4 the B operands (keys or values).
template <KvType kType>
void AttendTile(const AttentionTask& task, float* scratch) {
  const int32_t hd = task.kv.head_dim, H = task.n_q_heads;
  const int32_t n_ds = hd / 32;  // 32-dimension slices of a query or key
  const int32_t n_vs = hd / 16;  // 16-column slices of a value row
  // Scratch: acc [16][H][hd] f32, lsum [16][H][16] f32, run_max [16 * H] f32, cbuf [2][16][16] f32,
  // qt [H][n_ds] tiles, kt [2][n_ds] tiles, vt [n_vs] tiles, pt [H] tiles (tiles: 1 KB of bf16).
  float* acc = reinterpret_cast<float*>(AlignUp(scratch));
  float* lsum = acc + 16 * H * hd;
  float* run_max = lsum + 16 * H * 16;
  float* cbuf = reinterpret_cast<float*>(AlignUp(run_max + 16 * H));
  uint8_t* qt = AlignUp(cbuf + 2 * 256);
  uint8_t* kt = qt + static_cast<size_t>(H * n_ds) * 1024;
  uint8_t* vt = kt + static_cast<size_t>(2 * n_ds) * 1024;
  uint8_t* pt = vt + static_cast<size_t>(n_vs) * 1024;
  for (int64_t i = 0; i < 16 * H * hd; i += 16) _mm512_store_ps(acc + i, _mm512_setzero_ps());
  for (int64_t i = 0; i < 16 * H * 16; i += 16) _mm512_store_ps(lsum + i, _mm512_setzero_ps());
  for (int64_t i = 0; i < 16 * H; ++i) run_max[i] = -INFINITY;
  // Queries, scaled, as A tiles: tile (h, ds) row t = q[t][h][ds * 32 .. + 32].
  const __m512 vscale = _mm512_set1_ps(task.scale);
  for (int32_t h = 0; h < H; ++h) {
    for (int32_t ds = 0; ds < n_ds; ++ds) {
      uint8_t* tile = qt + static_cast<size_t>(h * n_ds + ds) * 1024;
      for (int t = 0; t < 16; ++t) {
        const float* q = task.q + (task.t_begin + t) * task.ldq + h * hd + ds * 32;
        _mm512_store_si512(tile + 64 * t,
                           ToBf16Row(_mm512_mul_ps(_mm512_loadu_ps(q), vscale),
                                     _mm512_mul_ps(_mm512_loadu_ps(q + 16), vscale)));
      }
    }
  }
  const __m512i interleave = PairInterleave();
  const int64_t first_pos = task.pos0 + task.t_begin;  // position of the task's first token
  const int64_t last_pos = first_pos + 15;
  Configure(64);
  for (int64_t c0 = 0; c0 <= last_pos; c0 += 32) {
    // Keys of the chunk (two blocks of 16 positions) as B tiles: tile (blk, ds) row r holds dims
    // ds * 32 + 2r and + 1 for the block's 16 positions, interleaved. Positions past the last
    // query hold whatever the cache has: their scores are masked, their values zeroed below.
    for (int blk = 0; blk < 2; ++blk) {
      const int64_t block = c0 / 16 + blk;
      const KvElement<kType>* kb =
          block * 16 > last_pos ? nullptr : task.kv.KeyBlock<const KvElement<kType>>(block);
      for (int32_t ds = 0; ds < n_ds; ++ds) {
        uint8_t* tile = kt + static_cast<size_t>(blk * n_ds + ds) * 1024;
        for (int r = 0; r < 16; ++r) {
          if (block * 16 > last_pos) {
            _mm512_store_si512(tile + 64 * r, _mm512_setzero_si512());
            continue;
          }
          const int64_t d = ds * 32 + 2 * r;
          const __m512i packed = ToBf16Row(KRow<kType>(kb, d), KRow<kType>(kb, d + 1));
          _mm512_store_si512(tile + 64 * r, _mm512_permutexvar_epi16(interleave, packed));
        }
      }
    }
    // Values as B tiles: tile vs row r holds positions c0 + 2r and + 1 for columns vs * 16 ..+16.
    // Rows p and p + 1 (p even) are in one block: consecutive rows of head_dim elements.
    const KvElement<kType>* vrow[16];
    for (int r = 0; r < 16; ++r) {
      const int64_t p = c0 + 2 * r;
      vrow[r] = p <= last_pos ? task.kv.ValueRow<const KvElement<kType>>(p) : nullptr;
    }
    for (int32_t vs = 0; vs < n_vs; ++vs) {
      uint8_t* tile = vt + static_cast<size_t>(vs) * 1024;
      for (int r = 0; r < 16; ++r) {
        const int64_t p = c0 + 2 * r;
        const __m512 a = p <= last_pos ? VRow16<kType>(vrow[r], vs * 16) : _mm512_setzero_ps();
        const __m512 b =
            p + 1 <= last_pos ? VRow16<kType>(vrow[r] + hd, vs * 16) : _mm512_setzero_ps();
        _mm512_store_si512(tile + 64 * r, _mm512_permutexvar_epi16(interleave, ToBf16Row(a, b)));
      }
    }
    // Scores and the online softmax, head by head; the probabilities become A tiles.
    for (int32_t h = 0; h < H; ++h) {
      _tile_zero(0);
      _tile_zero(1);
      for (int32_t ds = 0; ds < n_ds; ++ds) {
        _tile_loadd(2, qt + static_cast<size_t>(h * n_ds + ds) * 1024, 64);
        _tile_loadd(3, kt + static_cast<size_t>(ds) * 1024, 64);
        _tile_loadd(4, kt + static_cast<size_t>(n_ds + ds) * 1024, 64);
        _tile_dpbf16ps(0, 2, 3);
        _tile_dpbf16ps(1, 2, 4);
      }
      _tile_stored(0, cbuf, 64);
      _tile_stored(1, cbuf + 256, 64);
      uint8_t* p_tile = pt + static_cast<size_t>(h) * 1024;
      for (int t = 0; t < 16; ++t) {
        const int64_t valid = first_pos + t + 1 - c0;  // visible positions in this chunk
        if (valid <= 0) {
          _mm512_store_si512(p_tile + 64 * t, _mm512_setzero_si512());
          continue;
        }
        const __mmask16 m0 = avx512::MaskFor(valid),
                        m1 = valid > 16 ? avx512::MaskFor(valid - 16) : __mmask16{0};
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        const __m512 s0 = _mm512_mask_mov_ps(ninf, m0, _mm512_load_ps(cbuf + 16 * t));
        const __m512 s1 = _mm512_mask_mov_ps(ninf, m1, _mm512_load_ps(cbuf + 256 + 16 * t));
        const int64_t th = t * H + h;
        const __m512 smax = _mm512_max_ps(s0, s1);
        if (_mm512_cmp_ps_mask(smax, _mm512_set1_ps(run_max[th]), _CMP_GT_OQ) != 0) {
          const float m = _mm512_reduce_max_ps(smax);
          const __m512 corr = _mm512_set1_ps(expf(run_max[th] - m));
          run_max[th] = m;
          _mm512_store_ps(lsum + th * 16, _mm512_mul_ps(_mm512_load_ps(lsum + th * 16), corr));
          float* a = acc + th * hd;
          for (int32_t c = 0; c < hd; c += 16)
            _mm512_store_ps(a + c, _mm512_mul_ps(_mm512_load_ps(a + c), corr));
        }
        const __m512 vmax = _mm512_set1_ps(run_max[th]);
        const __m512 p0 = _mm512_maskz_mov_ps(m0, avx512::Exp(_mm512_sub_ps(s0, vmax)));
        const __m512 p1 = _mm512_maskz_mov_ps(m1, avx512::Exp(_mm512_sub_ps(s1, vmax)));
        _mm512_store_ps(lsum + th * 16,
                        _mm512_add_ps(_mm512_load_ps(lsum + th * 16), _mm512_add_ps(p0, p1)));
        _mm512_store_si512(p_tile + 64 * t, ToBf16Row(p0, p1));
      }
    }
    // acc += P V, two 16-column slices at a time.
    for (int32_t vs = 0; vs < n_vs; vs += 2) {
      _tile_loadd(3, vt + static_cast<size_t>(vs) * 1024, 64);
      _tile_loadd(4, vt + static_cast<size_t>(vs + 1) * 1024, 64);
      for (int32_t h = 0; h < H; ++h) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_loadd(2, pt + static_cast<size_t>(h) * 1024, 64);
        _tile_dpbf16ps(0, 2, 3);
        _tile_dpbf16ps(1, 2, 4);
        _tile_stored(0, cbuf, 64);
        _tile_stored(1, cbuf + 256, 64);
        for (int t = 0; t < 16; ++t) {
          float* a = acc + (t * H + h) * hd + vs * 16;
          _mm512_store_ps(a, _mm512_add_ps(_mm512_load_ps(a), _mm512_load_ps(cbuf + 16 * t)));
          _mm512_store_ps(
              a + 16, _mm512_add_ps(_mm512_load_ps(a + 16), _mm512_load_ps(cbuf + 256 + 16 * t)));
        }
      }
    }
  }
  _tile_release();
  for (int t = 0; t < 16; ++t) {
    float* out = task.out + (task.t_begin + t) * task.ldo;
    for (int32_t h = 0; h < H; ++h) {
      const int64_t th = t * H + h;
      const __m512 inv =
          _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_load_ps(lsum + th * 16)));
      for (int32_t c = 0; c < hd; c += 16) {
        _mm512_storeu_ps(out + h * hd + c, _mm512_mul_ps(_mm512_load_ps(acc + th * hd + c), inv));
      }
    }
  }
}

}  // namespace

void PrefillAttention(const AttentionTask& task, float* scratch) {
  const int32_t hd = task.kv.head_dim;
  // The default f16 cache only: an f32 cache is the precise setting (the oracle path), int8 has
  // per-position scales the tiles do not apply.
  const bool tiles_fit = hd % 32 == 0 && hd <= 256 && task.kv.type == KvType::kF16;
  for (int64_t t0 = task.t_begin; t0 < task.t_end; t0 += 16) {
    AttentionTask part = task;
    part.t_begin = t0;
    part.t_end = task.t_end - t0 < 16 ? task.t_end : t0 + 16;
    if (!tiles_fit || part.t_end - part.t_begin < 16) {
      Avx512Kernels().attention(part, scratch);  // a last partial block: the vector form
    } else {
      AttendTile<KvType::kF16>(part, scratch);
    }
  }
}

double Int8Peak(double seconds) {
  // Four accumulator tiles fed by two A and two B tiles loaded once: TDPBSUD throughput only.
  Configure(64);
  alignas(64) int8_t a_data[16 * 64];
  alignas(64) uint8_t b_data[16 * 64];
  std::memset(a_data, 1, sizeof(a_data));
  std::memset(b_data, 2, sizeof(b_data));
  _tile_loadd(4, a_data, 64);
  _tile_loadd(5, a_data, 64);
  _tile_loadd(6, b_data, 64);
  _tile_loadd(7, b_data, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  uint64_t macs = 0;
  const int64_t start = avx512::NowNanos();
  double elapsed = 0.0;
  while (elapsed < seconds) {
    for (int it = 0; it < 1 << 12; ++it) {
      _tile_dpbsud(0, 4, 6);
      _tile_dpbsud(1, 4, 7);
      _tile_dpbsud(2, 5, 6);
      _tile_dpbsud(3, 5, 7);
    }
    macs += uint64_t{4} * 16 * 16 * 64 * (1u << 12);
    elapsed = static_cast<double>(avx512::NowNanos() - start) * 1e-9;
  }
  alignas(64) int32_t sink[16][16];
  _tile_stored(0, sink, 64);
  _tile_release();
  if (sink[0][0] == 42) macs += 1;  // keep the tiles' results observable
  return static_cast<double>(macs) / elapsed;
}

}  // namespace amx

const KernelTable& AmxKernels() {
  static const KernelTable kTable = [] {
    KernelTable t = Avx512Kernels();
    t.name = "amx";
    t.packed_gemm = amx::PackedGemm;
    t.prefill_gemm = amx::PrefillGemm;
    t.int8_peak = amx::Int8Peak;
    if (DetectCpuFeatures().amx_bf16) t.prefill_attention = amx::PrefillAttention;
    return t;
  }();
  return kTable;
}

}  // namespace pocket
