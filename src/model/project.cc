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

int64_t LoraMidCount(const LoraTerm& term, const AdapterSet& set) {
  int64_t n = 0;
  for (int i = 0; i < term.n_parts; ++i) {
    for (const AdapterUse& u : set) n += u.adapter->pair(term.layer, term.parts[i].target).rank;
  }
  return n;
}

void LoraMidRows(const ProjectContext& p, const LoraTerm& term, const AdapterSet& set,
                 const float* xn, int64_t ldxn, int64_t n, int64_t row_begin, int64_t row_end,
                 float* mid, int64_t ldmid, float* scratch) {
  int64_t off = 0;
  for (int i = 0; i < term.n_parts; ++i) {
    for (const AdapterUse& u : set) {
      const LoraPair& pair = u.adapter->pair(term.layer, term.parts[i].target);
      if (!pair.present()) continue;
      const int64_t b = std::max(row_begin, off), e = std::min(row_end, off + pair.rank);
      if (b < e) {
        p.k.dense_gemm(pair.a, xn, ldxn, n, b - off, e - off, {mid + off, ldmid, Epilogue::kStore},
                       scratch);
        const float scale = pair.scale * u.scale;
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = b; r < e; ++r) mid[t * ldmid + r] *= scale;
        }
      }
      off += pair.rank;
    }
  }
}

void LoraDeltaRows(const ProjectContext& p, const LoraTerm& term, const AdapterSet& set,
                   const float* mid, int64_t ldmid, int64_t n, int64_t o_begin, int64_t o_end,
                   float* delta) {
  for (int i = 0; i < term.n_parts; ++i) {
    const LoraPart& part = term.parts[static_cast<size_t>(i)];
    const int64_t b = std::max(o_begin, part.offset) - part.offset;
    const int64_t e = std::min(o_end, part.offset + part.rows) - part.offset;
    int64_t off = 0;  // this part's first intermediate row
    for (int j = 0; j < i; ++j) {
      for (const AdapterUse& u : set) off += u.adapter->pair(term.layer, term.parts[j].target).rank;
    }
    if (b >= e) continue;
    float* d = delta + part.offset;
    bool first = true;  // the first adapter's outputs are stored, the others' added
    for (const AdapterUse& u : set) {
      const LoraPair& pair = u.adapter->pair(term.layer, part.target);
      if (!pair.present()) continue;
      p.k.lora_expand(pair.bt, mid + off, ldmid, n, b, e, d, term.width, !first);
      first = false;
      off += pair.rank;
    }
    if (first) {  // no adapter of the set has this part: a zero term
      for (int64_t t = 0; t < n; ++t)
        std::memset(d + t * term.width + b, 0, static_cast<size_t>(e - b) * sizeof(float));
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
  const int64_t n_units = swiglu ? n_panels / 2 : n_panels;
  const int64_t cols = l.cols();
  // src: the row, normalized by src_norm inside the quantization (or already normalized, with
  // src_norm null: the same bits, kernel_table.h).
  auto panels_of = [&](int64_t b, int64_t e, int t, const float* src, int64_t ld,
                       const float* src_norm) {
    float* scratch = p.thread_scratch(t);
    QuantizedRows qt;
    qt.q = reinterpret_cast<int8_t*>(scratch);
    qt.scale = scratch + (cols / 4 + 16) / 16 * 16;
    qt.sum = qt.scale + cols / 32;
    qt.n_tokens = 1;
    qt.cols = cols;
    qt.group = l.p.layout.group;
    p.k.quantize_rows(src, ld, 1, cols, src_norm, p.c.rms_eps, &qt);
    if (lora != nullptr) {
      // This thread's panels' outputs of the term (gate and up rows of its pairs when fused).
      const int64_t rows = l.rows(), half = rows / 2;
      const float* mid = p.s.lora_mid;
      if (swiglu) {
        const int64_t o0 = std::min(b * kPanelRows, half), o1 = std::min(e * kPanelRows, half);
        LoraDeltaRows(p, *lora, *set, mid, 0, 1, o0, o1, p.s.lora_delta);
        LoraDeltaRows(p, *lora, *set, mid, 0, 1, half + o0, half + o1, p.s.lora_delta);
      } else {
        LoraDeltaRows(p, *lora, *set, mid, 0, 1, std::min(b * kPanelRows, rows),
                      std::min(e * kPanelRows, rows), p.s.lora_delta);
      }
    }
    if (swiglu) {
      p.k.packed_gemm(l.p, qt, 2 * b, 2 * e, out);
    } else {
      p.k.packed_gemm(l.p, qt, b, e, out);
    }
  };
  if (lora == nullptr) {
    p.pool.ParallelFor(n_units,
                       [&](int64_t b, int64_t e, int t) { panels_of(b, e, t, x, ldx, norm); });
    return;
  }
  // With a low-rank term, still one region: each thread computes its share of the intermediates
  // (its rank rows, from the row it normalizes itself), all meet at a barrier, then each adds
  // the term to its panels. The intermediates' bits do not depend on the split.
  const int64_t n_mid = LoraMidCount(*lora, *set);
  SpinBarrier barrier(p.pool.n_threads());
  p.pool.Run([&](int t) {
    const int64_t mb = p.pool.RangeBegin(n_mid, t), me = p.pool.RangeBegin(n_mid, t + 1);
    const float* xn = x;
    if (norm != nullptr) {  // normalized once, for the intermediates and the quantization
      p.k.rmsnorm(x, norm, p.c.rms_eps, cols, p.s.lora_thread_xn(t));
      xn = p.s.lora_thread_xn(t);
    }
    if (mb < me) {
      LoraMidRows(p, *lora, *set, xn, cols, 1, mb, me, p.s.lora_mid, 0, p.s.lora_scratch(t));
    }
    barrier.ArriveAndWait();
    const int64_t b = p.pool.RangeBegin(n_units, t), e = p.pool.RangeBegin(n_units, t + 1);
    if (b < e) panels_of(b, e, t, xn, cols, nullptr);
  });
}

void LoraDeltaRuns(const ProjectContext& p, const LoraTerm& term, const AdapterSet* const* sets,
                   const float* mid, int64_t ldmid, int64_t n, int64_t o_begin, int64_t o_end,
                   float* delta) {
  for (int64_t r0 = 0; r0 < n;) {
    const AdapterSet* set = sets[r0];
    int64_t r1 = r0 + 1;
    while (r1 < n && sets[r1] == set) ++r1;
    float* d = delta + r0 * term.width;
    if (set != nullptr && !set->empty()) {
      LoraDeltaRows(p, term, *set, mid + r0 * ldmid, ldmid, r1 - r0, o_begin, o_end, d);
    } else {
      for (int64_t t = 0; t < r1 - r0; ++t) {
        std::memset(d + t * term.width + o_begin, 0,
                    static_cast<size_t>(o_end - o_begin) * sizeof(float));
      }
    }
    r0 = r1;
  }
}

void ProjectPacked(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
                   const float* norm, const GemmOut& out, bool tiles, const LoraTerm* lora,
                   const AdapterSet* const* sets) {
  const int32_t tile_block = tiles && p.k.prefill_gemm != nullptr ? TileBlock(l.p.layout) : 0;
  const bool use_tiles = tile_block > 0;
  const int64_t n_panels = l.p.layout.n_panels();
  QuantizedRows q = p.s.quant;
  q.n_tokens = n;
  q.cols = l.cols();
  q.group = use_tiles ? tile_block : l.p.layout.group;
  p.pool.ParallelFor(n, [&](int64_t b, int64_t e, int t) {
    QuantizedRows part = q;
    part.q += b * q.cols;
    part.scale += b * q.n_groups();
    part.sum += b * q.n_groups();
    part.n_tokens = e - b;
    if (lora == nullptr) {
      p.k.quantize_rows(x + b * ldx, ldx, e - b, q.cols, norm, p.c.rms_eps, &part);
      return;
    }
    // The term's intermediates of this thread's rows (every rank row; one dot per row and
    // intermediate whatever the split), from the rows normalized into this thread's part of
    // lora_xn when the matrix normalizes its input, a few rows at a time; the quantization then
    // reads the normalized rows (the same bits as normalizing inside it, kernel_table.h).
    const int64_t sub = std::max(1, ForwardScratch::kLoraChunkRows / p.pool.n_threads());
    for (int64_t s0 = b; s0 < e; s0 += sub) {
      const int64_t s1 = std::min(e, s0 + sub);
      const float* xn = x + s0 * ldx;
      int64_t ldxn = ldx;
      if (norm != nullptr) {
        float* rows = p.s.lora_xn + t * sub * q.cols;
        for (int64_t r = s0; r < s1; ++r)
          p.k.rmsnorm(x + r * ldx, norm, p.c.rms_eps, q.cols, rows + (r - s0) * q.cols);
        xn = rows;
        ldxn = q.cols;
      }
      QuantizedRows rows_q = q;
      rows_q.q += s0 * q.cols;
      rows_q.scale += s0 * q.n_groups();
      rows_q.sum += s0 * q.n_groups();
      rows_q.n_tokens = s1 - s0;
      p.k.quantize_rows(xn, ldxn, s1 - s0, q.cols, nullptr, p.c.rms_eps, &rows_q);
      for (int64_t r0 = s0; r0 < s1;) {
        const AdapterSet* set = sets[r0];
        int64_t r1 = r0 + 1;
        while (r1 < s1 && sets[r1] == set) ++r1;
        if (set != nullptr && !set->empty()) {
          LoraMidRows(p, *lora, *set, xn + (r0 - s0) * ldxn, ldxn, r1 - r0, 0,
                      LoraMidCount(*lora, *set), p.s.lora_mid + r0 * p.s.lora_mid_floats,
                      p.s.lora_mid_floats, p.s.lora_scratch(t));
        }
        r0 = r1;
      }
    }
  });
  const auto gemm = use_tiles ? p.k.prefill_gemm : p.k.packed_gemm;
  const int64_t rows = l.rows(), half = rows / 2;
  const bool swiglu = out.epilogue == Epilogue::kSwiGlu;
  // Panels [b, e) (units of two panels, gate and up, for SwiGLU) for every row. With a term,
  // per chunk of up to kLoraChunkRows rows (the delta buffer's): the term's outputs of these
  // panels into lora_delta, then their products. A thread reads and writes only its own panels'
  // columns of the delta, so its chunks need no barrier between them.
  auto panels_of = [&](int64_t b, int64_t e) {
    const int64_t pb = swiglu ? 2 * b : b, pe = swiglu ? 2 * e : e;
    if (lora == nullptr) {
      gemm(l.p, q, pb, pe, out);
      return;
    }
    const int64_t o0 = std::min(b * kPanelRows, swiglu ? half : rows);
    const int64_t o1 = std::min(e * kPanelRows, swiglu ? half : rows);
    for (int64_t c0 = 0; c0 < n; c0 += ForwardScratch::kLoraChunkRows) {
      const int64_t c1 = std::min(n, c0 + ForwardScratch::kLoraChunkRows);
      QuantizedRows qc = q;
      qc.q += c0 * q.cols;
      qc.scale += c0 * q.n_groups();
      qc.sum += c0 * q.n_groups();
      qc.n_tokens = c1 - c0;
      GemmOut part = out;
      part.y += c0 * out.ld;
      bool any = false;
      for (int64_t r = c0; r < c1; ++r) any |= sets[r] != nullptr && !sets[r]->empty();
      if (any) {  // else the chunk runs as it would with no adapters at all
        const float* mid = p.s.lora_mid + c0 * p.s.lora_mid_floats;
        LoraDeltaRuns(p, *lora, sets + c0, mid, p.s.lora_mid_floats, c1 - c0, o0, o1,
                      p.s.lora_delta);
        if (swiglu) {
          LoraDeltaRuns(p, *lora, sets + c0, mid, p.s.lora_mid_floats, c1 - c0, half + o0,
                        half + o1, p.s.lora_delta);
        }
        part.add = p.s.lora_delta;
        part.ld_add = lora->width;
      }
      gemm(l.p, qc, pb, pe, part);
    }
  };
  p.pool.ParallelFor(swiglu ? n_panels / 2 : n_panels,
                     [&](int64_t b, int64_t e, int) { panels_of(b, e); });
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
