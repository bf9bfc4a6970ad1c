// AMX-INT8 kernels for prefill (many tokens): the packed matmul on 16x16 int32 tiles, bit-identical
// to the reference (each tile's integer sums are exactly the per-group dot products; the float
// epilogue is the same as the AVX-512 kernel's). Everything else is the AVX-512 table. Compiled
// with AMX and AVX-512 flags; used only when the CPU has AMX and the kernel granted tile data.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/kernel_table.h"
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
          const __m512 gate = _mm512_load_ps(acc[i][0]), up = _mm512_load_ps(acc[i][1]);
          _mm512_storeu_ps(out.y + t * out.ld + (p / 2) * 16,
                           _mm512_mul_ps(avx512::Silu(gate), up));
          continue;
        }
        for (int j = 0; j < n_panels; ++j) {
          const int64_t row0 = (p + j) * 16;
          const int64_t n = rows - row0 < 16 ? rows - row0 : 16;
          const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1u);
          float* y = out.y + t * out.ld + row0;
          __m512 v = _mm512_load_ps(acc[i][j]);
          if (out.epilogue == Epilogue::kAccumulate)
            v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
          _mm512_mask_storeu_ps(y, mask, v);
        }
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
    avx512::PackedGemm(w, rest, panel_begin, panel_end, o);
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
    t.int8_peak = amx::Int8Peak;
    return t;
  }();
  return kTable;
}

}  // namespace pocket
