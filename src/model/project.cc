#include "model/project.h"

#include <algorithm>
#include <cstring>

namespace pocket {

// Columns per activation block of the tile form: the largest multiple of the weight group that
// divides the columns, up to 512 (pocket-0.3b: 448 for d_model 896, 512 for d_ff 2560). Finer
// blocks keep activation outliers more local, but a tile engine stops after every block for a
// float epilogue: at 128 columns the AMX matmul runs at about half the speed it reaches at 448.
// Measured on pocket-0.3b INT4 (random weights, 96 tokens, last-position logits against the numpy
// reference): mean KL 6.1e-4 with blocks of at most 128, 6.8e-4 at most 512, 1.1e-3 whole rows.
// Blocks are whole 64-byte tile rows too; 0 when no block fits (the exact form is used then).
int32_t TileBlock(const PackedLayout& l) {
  const int32_t step = l.group % 64 == 0 ? l.group : 64;  // groups are 32 or multiples of 64
  for (int32_t block = 512 / step * step; block >= step; block -= step) {
    if (l.cols % block == 0 && block % l.group == 0) return block;
  }
  return 0;
}

void LoraMids(const ProjectContext& p, const LoraTerm& term, const AdapterSet& set, const float* x,
              const float* norm, int64_t cols, float* ts) {
  float* xn = ts;
  float* mid = ts + cols;
  float* scratch = mid + p.s.lora_mid_floats;
  if (norm != nullptr) {
    p.k.rmsnorm(x, norm, p.c.rms_eps, cols, xn);
  } else {
    std::memcpy(xn, x, static_cast<size_t>(cols) * sizeof(float));
  }
  for (int i = 0; i < term.n_parts; ++i) {
    for (const AdapterUse& u : set) {
      const LoraPair& pair = u.adapter->pair(term.layer, term.parts[static_cast<size_t>(i)].target);
      if (!pair.present()) continue;
      p.k.dense_gemm(pair.a, xn, cols, 1, 0, pair.rank, {mid, pair.rank, Epilogue::kStore},
                     scratch);
      const float s = pair.scale * u.scale;
      for (int32_t r = 0; r < pair.rank; ++r) mid[r] *= s;
      mid += pair.rank;
    }
  }
}

void LoraDelta(const ProjectContext& p, const LoraTerm& term, const AdapterSet& set,
               int64_t o_begin, int64_t o_end, float* ts, int64_t cols, float* delta) {
  const float* mid = ts + cols;
  float* scratch = ts + cols + p.s.lora_mid_floats;
  for (int i = 0; i < term.n_parts; ++i) {
    const LoraPart& part = term.parts[static_cast<size_t>(i)];
    const int64_t b = std::max(o_begin, part.offset) - part.offset;
    const int64_t e = std::min(o_end, part.offset + part.rows) - part.offset;
    bool first = true;
    for (const AdapterUse& u : set) {
      const LoraPair& pair = u.adapter->pair(term.layer, part.target);
      if (!pair.present()) continue;
      if (b < e) {
        p.k.dense_gemm(
            pair.b, mid, pair.rank, 1, b, e,
            {delta + part.offset, term.width, first ? Epilogue::kStore : Epilogue::kAccumulate},
            scratch);
      }
      first = false;
      mid += pair.rank;
    }
    if (first && b < e) {
      std::memset(delta + part.offset + b, 0, static_cast<size_t>(e - b) * sizeof(float));
    }
  }
}

void ProjectOneRow(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx,
                   const float* norm, const GemmOut& out, const LoraTerm* lora,
                   const AdapterSet* set) {
  // Every thread quantizes the one activation row itself (identical results, a few hundred
  // nanoseconds) so the step is one parallel region with no serial gap.
  const bool swiglu = out.epilogue == Epilogue::kSwiGlu;
  const int64_t n_panels = l.p.layout.n_panels();
  const int64_t cols = l.cols();
  p.pool.ParallelFor(swiglu ? n_panels / 2 : n_panels, [&](int64_t b, int64_t e, int t) {
    float* scratch = p.thread_scratch(t);
    QuantizedRows qt;
    qt.q = reinterpret_cast<int8_t*>(scratch);
    qt.scale = scratch + (cols / 4 + 16) / 16 * 16;
    qt.sum = qt.scale + cols / 32;
    qt.n_tokens = 1;
    qt.cols = cols;
    qt.group = l.p.layout.group;
    p.k.quantize_rows(x, ldx, 1, cols, norm, p.c.rms_eps, &qt);
    if (lora != nullptr) {
      // This thread's panels' outputs of the term (gate and up rows of its pairs when fused).
      float* ts = p.s.lora_scratch(t);
      LoraMids(p, *lora, *set, x, norm, cols, ts);
      const int64_t rows = l.rows(), half = rows / 2;
      if (swiglu) {
        const int64_t o0 = std::min(b * kPanelRows, half), o1 = std::min(e * kPanelRows, half);
        LoraDelta(p, *lora, *set, o0, o1, ts, cols, p.s.lora_delta);
        LoraDelta(p, *lora, *set, half + o0, half + o1, ts, cols, p.s.lora_delta);
      } else {
        LoraDelta(p, *lora, *set, std::min(b * kPanelRows, rows), std::min(e * kPanelRows, rows),
                  ts, cols, p.s.lora_delta);
      }
    }
    if (swiglu) {
      p.k.packed_gemm(l.p, qt, 2 * b, 2 * e, out);
    } else {
      p.k.packed_gemm(l.p, qt, b, e, out);
    }
  });
}

void ProjectPacked(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                   const float* norm, const GemmOut& out, bool tiles) {
  const int32_t tile_block = tiles && p.k.prefill_gemm != nullptr ? TileBlock(l.p.layout) : 0;
  const bool use_tiles = tile_block > 0;
  const int64_t n_panels = l.p.layout.n_panels();
  QuantizedRows q = p.s.quant;
  q.n_tokens = n;
  q.cols = l.cols();
  q.group = use_tiles ? tile_block : l.p.layout.group;
  p.pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
    QuantizedRows part = q;
    part.q += b * q.cols;
    part.scale += b * q.n_groups();
    part.sum += b * q.n_groups();
    part.n_tokens = e - b;
    p.k.quantize_rows(x + b * ldx, ldx, e - b, q.cols, norm, p.c.rms_eps, &part);
  });
  const auto gemm = use_tiles ? p.k.prefill_gemm : p.k.packed_gemm;
  if (out.epilogue == Epilogue::kSwiGlu) {
    p.pool.ParallelFor(n_panels / 2,
                       [&](int64_t b, int64_t e, int) { gemm(l.p, q, 2 * b, 2 * e, out); });
  } else {
    p.pool.ParallelFor(n_panels, [&](int64_t b, int64_t e, int) { gemm(l.p, q, b, e, out); });
  }
}

void ProjectDense(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                  const float* norm, const GemmOut& out) {
  const float* input = x;
  int64_t ld = ldx;
  if (norm != nullptr) {
    for (int64_t t = 0; t < n; ++t)
      p.k.rmsnorm(x + t * ldx, norm, p.c.rms_eps, l.cols(), p.s.xn + t * l.cols());
    input = p.s.xn;
    ld = l.cols();
  }
  p.pool.ParallelFor(l.rows(), [&](int64_t b, int64_t e, int t) {
    p.k.dense_gemm(l.w, input, ld, n, b, e, out, p.thread_scratch(t));
  });
}

}  // namespace pocket
