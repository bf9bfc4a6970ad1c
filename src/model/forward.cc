#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/project.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

// Everything one forward call needs, gathered once.
struct Pass {
  const ModelConfig& c;
  const ModelWeights& w;
  const ProjectContext ctx;
  const ForwardBatch& b;
  int32_t n_rows;
  // The kernel-form runs of the current stage (the layers', then the output matrix's).
  std::span<const ForwardScratch::FormRun> runs;
  bool any_adapters = false;  // some segment has adapters (ForwardScratch::row_adapters)

  ForwardScratch& s() const { return ctx.s; }
  ThreadPool& pool() const { return ctx.pool; }
  const KernelTable& k() const { return ctx.k; }
  void Trace([[maybe_unused]] std::string_view name, [[maybe_unused]] const float* x,
             [[maybe_unused]] int64_t cols) const {
#if POCKET_FORWARD_TRACE
    if (b.trace != nullptr && *b.trace) (*b.trace)(name, x, n_rows, cols, cols);
#endif
  }
};

bool HasAdapters(const AdapterSet* set) {
  return set != nullptr && !set->empty();
}

// out = W · norm?(x) for every row of the stage, each run of rows in its form.
void ProjectPlain(const Pass& p, const Linear& l, const float* x, int64_t ldx, const float* norm,
                  const GemmOut& out) {
  if (!l.packed) {  // the dense path has one form: every row at once
    ProjectDense(p.ctx, l, x, ldx, p.runs.back().row_end, norm, out);
    return;
  }
  for (const ForwardScratch::FormRun& run : p.runs) {
    const int64_t n = run.row_end - run.row_begin;
    GemmOut part = out;
    part.y += run.row_begin * out.ld;
    if (part.add != nullptr) part.add += run.row_begin * out.ld_add;
    const float* xr = x + run.row_begin * ldx;
    if (n == 1) {
      ProjectOneRow(p.ctx, l, xr, ldx, norm, part);
    } else {
      ProjectPacked(p.ctx, l, xr, ldx, n, norm, part, run.tiles);
    }
  }
}

// The intermediates of the adapters' term for rows [c0, c1) of the stage (at most
// kLoraChunkRows) into lora_mid: the inputs normalized into lora_xn (when the matrix normalizes
// its input), then per run of rows sharing a set the rank rows split over the threads.
void LoraTerms(const Pass& p, const LoraTerm& lora, const float* xr, int64_t ldx, int32_t c0,
               int32_t c1, const float* norm, int64_t cols) {
  ForwardScratch& s = p.s();
  const AdapterSet* first = s.row_adapters[static_cast<size_t>(c0)];
  if (c1 - c0 == 1) {  // one row (decode): one parallel region, each thread normalizes the row
    p.pool().ParallelFor(LoraMidCount(lora, *first), [&](int64_t b, int64_t e, int thread) {
      const float* xn = xr;
      if (norm != nullptr) {
        p.k().rmsnorm(xr, norm, p.c.rms_eps, cols, s.lora_thread_xn(thread));
        xn = s.lora_thread_xn(thread);
      }
      LoraMidRows(p.ctx, lora, *first, xn, cols, 1, b, e, s.lora_mid, s.lora_mid_floats,
                  s.lora_scratch(thread));
    });
    return;
  }
  const float* xn = xr;
  int64_t ldxn = ldx;
  if (norm != nullptr) {
    p.pool().ParallelFor(c1 - c0, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        p.k().rmsnorm(xr + t * ldx, norm, p.c.rms_eps, cols, s.lora_xn + t * cols);
    });
    xn = s.lora_xn;
    ldxn = cols;
  }
  for (int32_t r0 = c0; r0 < c1;) {
    const AdapterSet* set = s.row_adapters[static_cast<size_t>(r0)];
    int32_t r1 = r0 + 1;
    while (r1 < c1 && s.row_adapters[static_cast<size_t>(r1)] == set) ++r1;
    if (HasAdapters(set)) {
      p.pool().ParallelFor(LoraMidCount(lora, *set), [&](int64_t b, int64_t e, int thread) {
        LoraMidRows(p.ctx, lora, *set, xn + (r0 - c0) * ldxn, ldxn, r1 - r0, b, e,
                    s.lora_mid + (r0 - c0) * s.lora_mid_floats, s.lora_mid_floats,
                    s.lora_scratch(thread));
      });
    }
    r0 = r1;
  }
}

// The same with the adapters' low-rank term of `lora` added before the epilogue, for the rows
// whose segment has adapters: a packed run of several rows in its form with the term inside the
// matrix's two regions (ProjectPacked), a one-row run in one region (ProjectOneRow), a dense
// matrix in chunks of up to kLoraChunkRows rows (the delta buffer's size); rows without adapters
// run as they would with none at all.
void Project(const Pass& p, const Linear& l, const float* x, int64_t ldx, const float* norm,
             const GemmOut& out, const LoraTerm& lora) {
  if (!p.any_adapters) {
    ProjectPlain(p, l, x, ldx, norm, out);
    return;
  }
  ForwardScratch& s = p.s();
  const int64_t cols = l.cols();
  ForwardScratch::FormRun all{0, p.runs.back().row_end, false};
  const std::span<const ForwardScratch::FormRun> runs =
      l.packed ? p.runs : std::span<const ForwardScratch::FormRun>(&all, 1);
  for (const ForwardScratch::FormRun& run : runs) {
    if (l.packed && run.row_end - run.row_begin > 1) {
      // Several rows: the whole run in the matrix's own two regions, the term computed per chunk
      // of rows inside them (ProjectPacked); a run without adapters as with none at all.
      const int64_t n = run.row_end - run.row_begin;
      bool any = false;
      for (int32_t t = run.row_begin; t < run.row_end; ++t)
        any |= HasAdapters(s.row_adapters[static_cast<size_t>(t)]);
      GemmOut part = out;
      part.y += run.row_begin * out.ld;
      const float* xr = x + run.row_begin * ldx;
      if (any) {
        ProjectPacked(p.ctx, l, xr, ldx, n, norm, part, run.tiles, &lora,
                      s.row_adapters.data() + run.row_begin);
      } else {
        ProjectPacked(p.ctx, l, xr, ldx, n, norm, part, run.tiles);
      }
      continue;
    }
    for (int32_t c0 = run.row_begin; c0 < run.row_end; c0 += ForwardScratch::kLoraChunkRows) {
      const int32_t c1 = std::min(run.row_end, c0 + ForwardScratch::kLoraChunkRows);
      const int64_t n = c1 - c0;
      bool any = false;
      for (int32_t t = c0; t < c1; ++t) any |= HasAdapters(s.row_adapters[static_cast<size_t>(t)]);
      GemmOut part = out;
      part.y += c0 * out.ld;
      const float* xr = x + c0 * ldx;
      if (any) {
        part.add = s.lora_delta;
        part.ld_add = lora.width;
      }
      if (any && n == 1 && l.packed) {  // one region: ProjectOneRow computes the whole term
        ProjectOneRow(p.ctx, l, xr, ldx, norm, part, &lora,
                      s.row_adapters[static_cast<size_t>(c0)]);
        continue;
      }
      const AdapterSet* const* sets = s.row_adapters.data() + c0;
      if (any) LoraTerms(p, lora, xr, ldx, c0, c1, norm, cols);
      if (any) {
        // The outputs, split by output rows; runs of rows that share a set go together.
        p.pool().ParallelFor(lora.width, [&](int64_t ob, int64_t oe, int) {
          LoraDeltaRuns(p.ctx, lora, sets, s.lora_mid, s.lora_mid_floats, n, ob, oe, s.lora_delta);
        });
      }
      if (!l.packed) {
        ProjectDense(p.ctx, l, xr, ldx, n, norm, part);
      } else {  // a one-row run without adapters
        ProjectOneRow(p.ctx, l, xr, ldx, norm, part);
      }
    }
  }
}

LoraTerm OneTarget(int32_t layer, LoraTarget t, int64_t rows) {
  LoraTerm term;
  term.layer = layer;
  term.parts[0] = {t, 0, rows};
  term.n_parts = 1;
  term.width = rows;
  return term;
}

// Runs of consecutive rows sharing a form, from per-segment row counts: a segment takes the tile
// form when it has at least kTileFormMinRows rows; neighbouring segments of one form share a run.
void AddToRuns(std::vector<ForwardScratch::FormRun>& runs, int32_t row_begin, int32_t row_end) {
  if (row_end <= row_begin) return;
  const bool tiles = row_end - row_begin >= kTileFormMinRows;
  if (!runs.empty() && runs.back().tiles == tiles && runs.back().row_end == row_begin) {
    runs.back().row_end = row_end;
  } else {
    runs.push_back({row_begin, row_end, tiles});
  }
}

Status CheckBatch(const Model& model, const ForwardScratch& s, const ForwardBatch& b) {
  const int32_t n = static_cast<int32_t>(b.tokens.size());
  if (n == 0) return InvalidArgumentError("no tokens to run");
  if (n > s.max_batch()) {
    return InternalError("batch of ", n, " tokens exceeds the scratch (", s.max_batch(), ")");
  }
  int32_t next = 0;
  for (const BatchSegment& seg : b.segments) {
    if (seg.kv == nullptr || seg.row_begin != next || seg.row_end <= seg.row_begin ||
        seg.row_end > n || seg.rope_pos < -1) {
      return InvalidArgumentError("batch segment of rows [", seg.row_begin, ", ", seg.row_end,
                                  ") does not continue the rows before it (", next,
                                  ") or has no cache");
    }
    if (seg.kv_pos < 0 || seg.kv_pos + seg.n_rows() > seg.kv->n_ctx()) {
      return OutOfRangeError("positions ", seg.kv_pos, " to ", seg.kv_pos + seg.n_rows() - 1,
                             " do not fit the context of ", seg.kv->n_ctx(), " tokens");
    }
    if (seg.hidden_begin < 0 || seg.hidden_begin > seg.hidden_end || seg.hidden_end > seg.kv_pos) {
      return InvalidArgumentError("batch segment of rows [", seg.row_begin, ", ", seg.row_end,
                                  ") hides slots [", seg.hidden_begin, ", ", seg.hidden_end,
                                  ") that do not end before its first slot ", seg.kv_pos);
    }
    if (HasAdapters(seg.adapters)) {
      for (const AdapterUse& u : *seg.adapters) {
        if (u.adapter == nullptr || u.adapter->n_layers() != model.config().n_layers) {
          return InvalidArgumentError("batch segment of rows [", seg.row_begin, ", ", seg.row_end,
                                      ") has an adapter for another model");
        }
      }
      if (AdapterMidFloats(*seg.adapters) > s.lora_mid_floats) {
        return FailedPreconditionError("batch segment of rows [", seg.row_begin, ", ", seg.row_end,
                                       ") has adapters the scratch was not sized ",
                                       "for (ForwardScratch::ReserveAdapters)");
      }
    }
    if (seg.path_from >= 0) {
      const int64_t last = int64_t{seg.first_position()} + seg.n_rows() - 1;
      if (seg.visibility != Visibility::kCausal || seg.hidden_begin != seg.hidden_end ||
          seg.rope_pos != -1 || seg.path_from > seg.kv_pos ||
          last + 1 - seg.path_from / 16 * 16 > kTreeTailPositions) {
        return InvalidArgumentError(
            "tree branch of rows [", seg.row_begin, ", ", seg.row_end, ") continuing a path of ",
            seg.path.size(), " positions from ", seg.path_from,
            ": must be causal, hide nothing, take its RoPE positions from the path, start its path "
            "at or before its first slot ",
            seg.kv_pos, " and span at most ", kTreeTailPositions,
            " positions from its path's block");
      }
      for (int32_t slot : seg.path) {
        if (slot < 0 || slot >= seg.kv->n_ctx()) {
          return OutOfRangeError("tree branch of rows [", seg.row_begin, ", ", seg.row_end,
                                 ") names slot ", slot, " outside the context of ",
                                 seg.kv->n_ctx());
        }
      }
    } else if (!seg.path.empty()) {
      return InvalidArgumentError("batch segment of rows [", seg.row_begin, ", ", seg.row_end,
                                  ") lists a path without its first position");
    }
    next = seg.row_end;
  }
  if (next != n) return InvalidArgumentError("batch segments cover ", next, " of ", n, " rows");
  int32_t previous = -1;
  for (int32_t r : b.output_rows) {
    if (r <= previous || r >= n) {
      return InvalidArgumentError("output rows must ascend within the ", n, " rows; got ", r,
                                  " after ", previous);
    }
    previous = r;
  }
  for (int32_t layer : b.hidden_layers) {
    if (layer < 0 || layer >= model.config().n_layers) {
      return InvalidArgumentError("hidden state of layer ", layer, " requested; the model has ",
                                  model.config().n_layers);
    }
  }
  previous = -1;
  for (int32_t r : b.hidden_rows) {
    if (r <= previous || r >= n) {
      return InvalidArgumentError("hidden rows must ascend within the ", n, " rows; got ", r,
                                  " after ", previous);
    }
    previous = r;
  }
  if (!b.hidden_layers.empty() && b.layer_hidden == nullptr) {
    return InvalidArgumentError("hidden states requested without an output buffer");
  }
  return Status::Ok();
}

// Element (r, col) of a matrix in a dense encoding (f32, f16, bf16 or Q8_0): its block
// dequantized.
float MatrixElement(const WeightMatrix& m, int64_t r, int64_t col) {
  const int64_t block = Traits(m.type).block_elems;
  float values[256];
  if (block > 256) return 0.0f;  // adapter factors are never of such types (adapter.cc)
  DequantizeRow(m.type, m.row(r) + (col / block) * static_cast<int64_t>(Traits(m.type).block_bytes),
                values, block);
  return values[col % block];
}

// The adapters' embedding terms: row += sum over the set of s * B · A[:, id] (lora_expand's
// rank-order sum, after the base row).
void EmbedAdapters(const Pass& p, const AdapterSet& set, int32_t id, float* row) {
  float* mid = p.s().lora_mid;
  for (const AdapterUse& u : set) {
    const LoraPair& pair = u.adapter->pair(0, LoraTarget::kEmbed);
    if (!pair.present()) continue;
    const float scale = pair.scale * u.scale;
    for (int32_t k = 0; k < pair.rank; ++k) mid[k] = scale * MatrixElement(pair.a, k, id);
    p.k().lora_expand(pair.bt, mid, pair.rank, 1, 0, p.c.d_model, row, p.c.d_model, true);
  }
}

Status Embed(const Pass& p) {
  const Linear& e = p.w.token_embd;
  const int64_t vocab = e.rows();
  for (const BatchSegment& seg : p.b.segments) {
    bool adapted = false;
    if (HasAdapters(seg.adapters)) {
      for (const AdapterUse& u : *seg.adapters)
        adapted |= u.adapter->pair(0, LoraTarget::kEmbed).present();
    }
    for (int32_t t = seg.row_begin; t < seg.row_end; ++t) {
      const int32_t id = p.b.tokens[static_cast<size_t>(t)];
      if (id < 0 || id >= vocab) {
        return OutOfRangeError("token id ", id, " at position ", seg.kv_pos + t - seg.row_begin,
                               " is outside the vocabulary (0 to ", vocab - 1, ")");
      }
      float* row = p.s().x + static_cast<size_t>(t) * p.c.d_model;
      if (e.packed) {
        DequantizePackedRow(e.p, id, row);
      } else {
        DequantizeRow(e.w.type, e.w.row(id), row, e.w.cols);
      }
      if (adapted) EmbedAdapters(p, *seg.adapters, id, row);
    }
  }
  return Status::Ok();
}

void RopeTables(const Model& model, const Pass& p) {
  const int32_t half = p.c.head_dim / 2;
  const std::vector<double>& inv_freq = model.rope_inv_freq();
  for (const BatchSegment& seg : p.b.segments) {
    const int32_t first = seg.first_position();
    for (int32_t t = seg.row_begin; t < seg.row_end; ++t) {
      const double pos = static_cast<double>(first + t - seg.row_begin);
      for (int32_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[static_cast<size_t>(i)];
        p.s().rope_cos[t * half + i] = static_cast<float>(std::cos(angle));
        p.s().rope_sin[t * half + i] = static_cast<float>(std::sin(angle));
      }
    }
  }
}

// The view a tree branch's rows attend through (BatchSegment::path): the cache, with the blocks
// from the one holding path_from on gathered into `tail` at the rows' logical positions (the
// ancestors' slots, then the branch's own), the rest of the last block zeroed.
KvHeadView GatherTreeTail(const BatchSegment& seg, const KvHeadView& cache, uint8_t* tail) {
  const int64_t first_block = seg.path_from / kKvBlockPositions;
  const int64_t begin = first_block * kKvBlockPositions;
  const int64_t own = seg.first_position();
  const int64_t end = own + seg.n_rows();
  const int64_t n_blocks = (end - begin + kKvBlockPositions - 1) / kKvBlockPositions;
  KvHeadView t = cache;  // type and head size; addresses below (contiguous: no pages)
  t.pages = nullptr;
  t.k = tail;
  t.v = tail + n_blocks * cache.BlockBytes();
  t.k_scale = reinterpret_cast<float*>(tail + 2 * n_blocks * cache.BlockBytes());
  t.v_scale = t.k_scale + n_blocks * kKvBlockPositions;
  for (int64_t pos = begin; pos < end; ++pos) {
    int64_t slot = pos;
    if (pos >= own) {
      slot = seg.kv_pos + (pos - own);
    } else if (pos >= seg.path_from) {
      slot = seg.path[static_cast<size_t>(pos - seg.path_from)];
    }
    CopyKvPosition(cache, slot, t, pos - begin);
  }
  // Lanes past the last row: never visible, but kernels load whole blocks.
  const int64_t eb = cache.ElementBytes();
  for (int64_t pos = end - begin; pos < n_blocks * kKvBlockPositions; ++pos) {
    const int64_t b = pos / kKvBlockPositions, lane = pos % kKvBlockPositions;
    for (int32_t d = 0; d < cache.head_dim; ++d)
      std::memset(t.KeyRow<uint8_t>(b, d) + lane * eb, 0, static_cast<size_t>(eb));
    std::memset(t.ValueRow<uint8_t>(pos), 0, static_cast<size_t>(cache.head_dim * eb));
    if (cache.type == KvType::kQ8) *t.KeyScale(pos) = *t.ValueScale(pos) = 0.0f;
  }
  KvHeadView view = cache;
  view.tail_block = first_block;
  view.tail_k = t.k;
  view.tail_v = t.v;
  view.tail_k_scale = t.k_scale;
  view.tail_v_scale = t.v_scale;
  return view;
}

// A segment's row blocks of 16 (attention tasks cover at most 16 query rows).
int64_t RowBlocks(const BatchSegment& seg) {
  return (seg.n_rows() + 15) / 16;
}

// With one row block per segment, and every segment in a cache of its own, a head's task stores
// its own keys and values first (one parallel region); otherwise every block of a head needs the
// rows of its segment stored before it, and a segment may read slots that another one writes.
bool StoreInTask(const ForwardBatch& b) {
  if (b.segments.size() > 64) return false;
  for (size_t i = 0; i < b.segments.size(); ++i) {
    if (RowBlocks(b.segments[i]) != 1) return false;
    for (size_t j = 0; j < i; ++j) {
      if (b.segments[j].kv == b.segments[i].kv) return false;
    }
  }
  return true;
}

// x += wo · attention(rope(q), rope(k), v) over the slots each row sees.
void AttentionBlock(const Pass& p, const LayerWeights& l, int32_t layer) {
  const ModelConfig& c = p.c;
  ForwardScratch& s = p.s();
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const int64_t ld = qd + 2 * kvd;  // qkv row: q | k | v
  float* qkv = s.qkv;
  if (l.qkv.present()) {
    LoraTerm term;
    term.layer = layer;
    term.parts = {
        {{LoraTarget::kQ, 0, qd}, {LoraTarget::kK, qd, kvd}, {LoraTarget::kV, qd + kvd, kvd}}};
    term.n_parts = 3;
    term.width = ld;
    Project(p, l.qkv, s.x, d, l.attn_norm, {qkv, ld, Epilogue::kStore}, term);
  } else {
    Project(p, l.wq, s.x, d, l.attn_norm, {qkv, ld, Epilogue::kStore},
            OneTarget(layer, LoraTarget::kQ, qd));
    // Each matrix normalizes its own input (cheap next to the matrix), whatever its encoding.
    Project(p, l.wk, s.x, d, l.attn_norm, {qkv + qd, ld, Epilogue::kStore},
            OneTarget(layer, LoraTarget::kK, kvd));
    Project(p, l.wv, s.x, d, l.attn_norm, {qkv + qd + kvd, ld, Epilogue::kStore},
            OneTarget(layer, LoraTarget::kV, kvd));
  }
  const bool interleaved = c.rope_style == RopeStyle::kInterleaved;
  const int32_t half = c.head_dim / 2;
  p.pool().ParallelFor(p.n_rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* q = qkv + t * ld;
      float* k = q + qd;
      float* v = k + kvd;
      if (l.bq != nullptr) {
        for (int64_t i = 0; i < qd; ++i) q[i] += l.bq[i];
        for (int64_t i = 0; i < kvd; ++i) k[i] += l.bk[i];
        for (int64_t i = 0; i < kvd; ++i) v[i] += l.bv[i];
      }
      if (c.qk_norm) {  // [n_heads, head_dim]: each head normalized on its own
        for (int32_t h = 0; h < c.n_heads; ++h)
          p.k().rmsnorm(q + h * hd, l.q_norm, c.rms_eps, hd, q + h * hd);
        for (int32_t h = 0; h < c.n_kv_heads; ++h)
          p.k().rmsnorm(k + h * hd, l.k_norm, c.rms_eps, hd, k + h * hd);
      }
      p.k().rope(q, c.n_heads, hd, s.rope_cos + t * half, s.rope_sin + t * half, interleaved);
      p.k().rope(k, c.n_kv_heads, hd, s.rope_cos + t * half, s.rope_sin + t * half, interleaved);
    }
  });
  // Append the batch's keys and values to the caches, then attend: one task per segment, KV head
  // and block of 16 rows (s.task_begin: the first task of each segment).
  const std::span<const BatchSegment> segs = p.b.segments;
  const int32_t group = c.gqa_group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto store = [&](const BatchSegment& seg, int64_t g) {
    const float* rows = qkv + seg.row_begin * ld;
    p.k().kv_store(seg.kv->head(layer, static_cast<int32_t>(g)), seg.kv_pos, seg.n_rows(),
                   rows + qd + g * hd, ld, rows + qd + kvd + g * hd, ld);
  };
  const bool store_in_task = StoreInTask(p.b);
  if (!store_in_task) {
    const int64_t n_stores = c.n_kv_heads * static_cast<int64_t>(segs.size());
    p.pool().ParallelFor(n_stores, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i)
        store(segs[static_cast<size_t>(i / c.n_kv_heads)], i % c.n_kv_heads);
    });
  }
  const int64_t n_tasks = s.task_begin.back();
  p.pool().ParallelFor(n_tasks, [&](int64_t b, int64_t e, int thread) {
    size_t si = 0;
    for (int64_t task_id = b; task_id < e; ++task_id) {
      while (s.task_begin[si + 1] <= task_id) ++si;
      const BatchSegment& seg = segs[si];
      const int64_t n_blocks = RowBlocks(seg), local = task_id - s.task_begin[si];
      const int64_t g = local / n_blocks, block = local % n_blocks;
      if (store_in_task) store(seg, g);
      AttentionTask task;
      task.q = qkv + seg.row_begin * ld + g * group * hd;
      task.ldq = ld;
      task.out = s.attn + seg.row_begin * qd + g * group * hd;
      task.ldo = qd;
      task.kv = seg.kv->head(layer, static_cast<int32_t>(g));
      if (seg.path_from >= 0) {
        task.kv = GatherTreeTail(seg, task.kv,
                                 s.tree_tail + static_cast<size_t>(thread) * s.tree_tail_bytes);
      }
      task.n_q_heads = group;
      task.pos0 = seg.path_from >= 0 ? seg.first_position() : seg.kv_pos;
      task.t_begin = block * 16;
      task.t_end = std::min<int64_t>(seg.n_rows(), block * 16 + 16);
      task.scale = scale;
      task.hidden_begin = seg.hidden_begin;
      task.hidden_end = seg.hidden_end;
      const bool causal = seg.visibility == Visibility::kCausal;
      if (!causal) task.visible_end = seg.kv_pos + seg.n_rows();
      // Causal segments of many rows on a table with a tile engine: the bf16 tile form
      // (kernel_table.h); segments that hide slots or see ahead use the general form.
      const bool tiles = seg.n_rows() >= kTileFormMinRows && p.k().prefill_attention != nullptr &&
                         seg.hidden_begin == seg.hidden_end && causal && seg.path_from < 0;
      (tiles ? p.k().prefill_attention : p.k().attention)(task, p.ctx.thread_scratch(thread));
    }
  });
  Project(p, l.wo, s.attn, qd, nullptr, {s.x, d, Epilogue::kAccumulate},
          OneTarget(layer, LoraTarget::kO, d));
}

// x += w_down · (silu(w_gate · norm(x)) * (w_up · norm(x))).
void FeedForwardBlock(const Pass& p, const LayerWeights& l, int32_t layer) {
  const ModelConfig& c = p.c;
  ForwardScratch& s = p.s();
  const int64_t d = c.d_model, ff = c.d_ff;
  if (l.gate_up.present()) {
    LoraTerm term;
    term.layer = layer;
    term.parts = {{{LoraTarget::kGate, 0, ff}, {LoraTarget::kUp, ff, ff}, {}}};
    term.n_parts = 2;
    term.width = 2 * ff;
    Project(p, l.gate_up, s.x, d, l.ffn_norm, {s.gate, ff, Epilogue::kSwiGlu}, term);
  } else {
    Project(p, l.w_gate, s.x, d, l.ffn_norm, {s.gate, ff, Epilogue::kStore},
            OneTarget(layer, LoraTarget::kGate, ff));
    Project(p, l.w_up, s.x, d, l.ffn_norm, {s.up, ff, Epilogue::kStore},
            OneTarget(layer, LoraTarget::kUp, ff));
    p.pool().ParallelFor(p.n_rows, [&](int64_t b, int64_t e, int) {
      p.k().silu_mul(s.gate + b * ff, s.up + b * ff, (e - b) * ff, s.gate + b * ff);
    });
  }
  Project(p, l.w_down, s.gate, ff, nullptr, {s.x, d, Epilogue::kAccumulate},
          OneTarget(layer, LoraTarget::kDown, d));
}

// The adapters' output-matrix term added to the logits of the stage's rows (rows[i]: the batch
// row whose set applies): per run of up to kLoraChunkRows rows sharing a set, the final norm into
// lora_xn, the intermediates A·norm(h) (scaled) into lora_mid, then logits += B·mid split over
// the vocabulary.
void OutputAdapters(const Pass& p, std::span<const int32_t> rows) {
  ForwardScratch& s = p.s();
  const int64_t d = p.c.d_model, vocab = p.c.vocab_size;
  const LoraTerm term = OneTarget(0, LoraTarget::kOutput, vocab);
  for (size_t r0 = 0; r0 < rows.size();) {
    const AdapterSet* set = s.row_adapters[static_cast<size_t>(rows[r0])];
    size_t r1 = r0 + 1;
    while (r1 < rows.size() && r1 - r0 < ForwardScratch::kLoraChunkRows &&
           s.row_adapters[static_cast<size_t>(rows[r1])] == set)
      ++r1;
    bool any = false;
    if (HasAdapters(set)) {
      for (const AdapterUse& u : *set) any |= u.adapter->pair(0, LoraTarget::kOutput).present();
    }
    if (any) {
      const int64_t n = static_cast<int64_t>(r1 - r0);
      p.pool().ParallelFor(n, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t)
          p.k().rmsnorm(s.x + (static_cast<int64_t>(r0) + t) * d, p.w.output_norm, p.c.rms_eps, d,
                        s.lora_xn + t * d);
      });
      p.pool().ParallelFor(LoraMidCount(term, *set), [&](int64_t b, int64_t e, int thread) {
        LoraMidRows(p.ctx, term, *set, s.lora_xn, d, n, b, e, s.lora_mid, s.lora_mid_floats,
                    s.lora_scratch(thread));
      });
      float* logits = p.b.logits + static_cast<int64_t>(r0) * vocab;
      p.pool().ParallelFor(vocab, [&](int64_t ob, int64_t oe, int) {
        int64_t off = 0;
        for (const AdapterUse& u : *set) {
          const LoraPair& pair = u.adapter->pair(0, LoraTarget::kOutput);
          if (!pair.present()) continue;
          p.k().lora_expand(pair.bt, s.lora_mid + off, s.lora_mid_floats, n, ob, oe, logits, vocab,
                            true);
          off += pair.rank;
        }
      });
    }
    r0 = r1;
  }
}

// The requested rows' outputs: hidden states, then (rows compacted to the front of the residual
// stream, which is not needed any more) the final norm and the output matrix.
void Outputs(Pass& p) {
  const ModelConfig& c = p.c;
  ForwardScratch& s = p.s();
  const size_t d = static_cast<size_t>(c.d_model);
  const std::span<const int32_t> rows = p.b.output_rows;
  if (rows.empty()) return;
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t r = static_cast<size_t>(rows[i]);
    if (r != i) std::memcpy(s.x + i * d, s.x + r * d, d * sizeof(float));
  }
  if (p.b.final_hidden != nullptr) {
    // In float: what a dense output matrix would multiply.
    for (size_t i = 0; i < rows.size(); ++i)
      p.k().rmsnorm(s.x + i * d, p.w.output_norm, c.rms_eps, c.d_model, p.b.final_hidden + i * d);
  }
  if (p.b.logits == nullptr) return;
  // The output matrix's form follows how many of each segment's rows it multiplies: the last row
  // of a long prompt takes the exact form, every row of it the tile form.
  s.runs.clear();
  size_t i = 0;
  for (const BatchSegment& seg : p.b.segments) {
    const size_t first = i;
    while (i < rows.size() && rows[i] < seg.row_end) ++i;
    AddToRuns(s.runs, static_cast<int32_t>(first), static_cast<int32_t>(i));
  }
  p.runs = s.runs;
  p.n_rows = static_cast<int32_t>(rows.size());
  ProjectPlain(p, p.w.output, s.x, c.d_model, p.w.output_norm,
               {p.b.logits, c.vocab_size, Epilogue::kStore});
  if (p.any_adapters) OutputAdapters(p, rows);
  p.Trace("logits", p.b.logits, c.vocab_size);
}

}  // namespace

Status Forward(const Model& model, ForwardScratch& s, ThreadPool& pool, const ForwardBatch& b) {
  POCKET_RETURN_IF_ERROR(CheckBatch(model, s, b));
  // The KV pages the rows write (a new one every 64 positions, reused pages first; a shared
  // page the rows write into is copied first).
  for (const BatchSegment& seg : b.segments) {
    POCKET_RETURN_IF_ERROR(seg.kv->Reserve(seg.kv_pos, seg.kv_pos + seg.n_rows()));
  }
  const ModelConfig& c = model.config();
  const int32_t n = static_cast<int32_t>(b.tokens.size());
  // The forms of the layers' matrices, and the attention tasks, per segment.
  s.runs.clear();
  s.task_begin.clear();
  s.task_begin.push_back(0);
  for (const BatchSegment& seg : b.segments) {
    AddToRuns(s.runs, seg.row_begin, seg.row_end);
    s.task_begin.push_back(s.task_begin.back() + c.n_kv_heads * RowBlocks(seg));
  }
  Pass p{c, model.weights(), ProjectContext{c, model.kernels(), s, pool}, b, n, s.runs};
  for (const BatchSegment& seg : b.segments) {
    p.any_adapters |= HasAdapters(seg.adapters);
    for (int32_t t = seg.row_begin; t < seg.row_end; ++t)
      s.row_adapters[static_cast<size_t>(t)] = seg.adapters;
  }
  POCKET_RETURN_IF_ERROR(Embed(p));
  RopeTables(model, p);
  p.Trace("embed", s.x, c.d_model);
  const size_t d = static_cast<size_t>(c.d_model);
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = p.w.layers[static_cast<size_t>(layer)];
    AttentionBlock(p, l, layer);
    FeedForwardBlock(p, l, layer);
#if POCKET_FORWARD_TRACE
    if (b.trace != nullptr && *b.trace) {
      const std::string name = "blk." + std::to_string(layer) + ".out";
      p.Trace(name, s.x, c.d_model);
    }
#endif
    const std::span<const int32_t> hidden_rows =
        b.hidden_rows.empty() ? b.output_rows : b.hidden_rows;
    for (size_t h = 0; h < b.hidden_layers.size(); ++h) {
      if (b.hidden_layers[h] != layer) continue;
      float* out = b.layer_hidden + h * hidden_rows.size() * d;
      for (size_t i = 0; i < hidden_rows.size(); ++i) {
        std::memcpy(out + i * d, s.x + static_cast<size_t>(hidden_rows[i]) * d, d * sizeof(float));
      }
    }
  }
  Outputs(p);
  return Status::Ok();
}

}  // namespace pocket
