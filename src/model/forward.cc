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
  ThreadPool& pool;
  int32_t n_tokens;
  int32_t pos0;
  const TreeBatch* tree = nullptr;  // set for candidate scoring (tree attention)

  float* thread_scratch(int t) const { return s.thread_scratch + t * s.per_thread_floats; }
};

// Batches at least this large use the table's prefill_gemm (when it has one).
constexpr int64_t kPrefillMinTokens = 32;

// Columns per activation block of the prefill form: the largest multiple of the weight group that
// divides the columns, up to 512 (pocket-0.3b: 448 for d_model 896, 512 for d_ff 2560). Finer
// blocks keep activation outliers more local, but a tile engine stops after every block for a
// float epilogue: at 128 columns the AMX matmul runs at about half the speed it reaches at 448.
// Measured on pocket-0.3b INT4 (random weights, 96 tokens, last-position logits against the numpy
// reference): mean KL 6.1e-4 with blocks of at most 128, 6.8e-4 at most 512, 1.1e-3 whole rows.
// Blocks are whole 64-byte tile rows too; 0 when no block fits (the exact form is used then).
int32_t PrefillBlock(const PackedLayout& l) {
  const int32_t step = l.group % 64 == 0 ? l.group : 64;  // groups are 32 or multiples of 64
  for (int32_t block = 512 / step * step; block >= step; block -= step) {
    if (l.cols % block == 0 && block % l.group == 0) return block;
  }
  return 0;
}

// out = W · norm?(x) for every token: x [n_tokens, l.cols()] with row stride ldx.
void Project(const Pass& p, const Linear& l, const float* x, int64_t ldx, const float* norm,
             const GemmOut& out) {
  const int64_t n = p.n_tokens;
  if (l.packed) {
    // Many tokens on a table with a tile engine: the prefill form (activation blocks of up to 512
    // columns, weights requantized per row; kernel_table.h). Otherwise the exact per-group form.
    const int32_t prefill_block =
        n >= kPrefillMinTokens && p.k.prefill_gemm != nullptr ? PrefillBlock(l.p.layout) : 0;
    const bool prefill = prefill_block > 0;
    const int64_t n_panels = l.p.layout.n_panels();
    const bool swiglu = out.epilogue == Epilogue::kSwiGlu;
    if (n == 1) {
      // Decode: every thread quantizes the one activation row itself (identical results, a few
      // hundred nanoseconds) so the step is one parallel region with no serial gap.
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
        if (swiglu) {
          p.k.packed_gemm(l.p, qt, 2 * b, 2 * e, out);
        } else {
          p.k.packed_gemm(l.p, qt, b, e, out);
        }
      });
      return;
    }
    QuantizedRows q = p.s.quant;
    q.n_tokens = n;
    q.cols = l.cols();
    q.group = prefill ? prefill_block : l.p.layout.group;
    p.pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
      QuantizedRows part = q;
      part.q += b * q.cols;
      part.scale += b * q.n_groups();
      part.sum += b * q.n_groups();
      part.n_tokens = e - b;
      p.k.quantize_rows(x + b * ldx, ldx, e - b, q.cols, norm, p.c.rms_eps, &part);
    });
    const auto gemm = prefill ? p.k.prefill_gemm : p.k.packed_gemm;
    if (swiglu) {
      p.pool.ParallelFor(n_panels / 2,
                         [&](int64_t b, int64_t e, int) { gemm(l.p, q, 2 * b, 2 * e, out); });
    } else {
      p.pool.ParallelFor(n_panels, [&](int64_t b, int64_t e, int) { gemm(l.p, q, b, e, out); });
    }
    return;
  }
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

Status Embed(const Pass& p, std::span<const int32_t> tokens) {
  const Linear& e = p.w.token_embd;
  const int64_t vocab = e.rows();
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t id = tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= vocab) {
      return OutOfRangeError("token id ", id, " at position ", p.pos0 + t,
                             " is outside the vocabulary (0 to ", vocab - 1, ")");
    }
    float* row = p.s.x + static_cast<size_t>(t) * p.c.d_model;
    if (e.packed) {
      DequantizePackedRow(e.p, id, row);
    } else {
      DequantizeRow(e.w.type, e.w.row(id), row, e.w.cols);
    }
  }
  return Status::Ok();
}

void RopeTables(const Model& model, const Pass& p) {
  const int32_t half = p.c.head_dim / 2;
  const std::vector<double>& inv_freq = model.rope_inv_freq();
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const double pos = static_cast<double>(
        p.tree != nullptr ? p.tree->rope_pos[static_cast<size_t>(t)] : p.pos0 + t);
    for (int32_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[static_cast<size_t>(i)];
      p.s.rope_cos[t * half + i] = static_cast<float>(std::cos(angle));
      p.s.rope_sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

// x += wo · attention(rope(q), rope(k), v) over all positions <= each token's own.
void AttentionBlock(const Pass& p, const LayerWeights& l, int32_t layer) {
  const ModelConfig& c = p.c;
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const int64_t ld = qd + 2 * kvd;  // qkv row: q | k | v
  float* qkv = p.s.qkv;
  if (l.qkv.present()) {
    Project(p, l.qkv, p.s.x, d, l.attn_norm, {qkv, ld, Epilogue::kStore});
  } else {
    Project(p, l.wq, p.s.x, d, l.attn_norm, {qkv, ld, Epilogue::kStore});
    // Each matrix normalizes its own input (cheap next to the matrix), whatever its encoding.
    Project(p, l.wk, p.s.x, d, l.attn_norm, {qkv + qd, ld, Epilogue::kStore});
    Project(p, l.wv, p.s.x, d, l.attn_norm, {qkv + qd + kvd, ld, Epilogue::kStore});
  }
  const bool interleaved = c.rope_style == RopeStyle::kInterleaved;
  const int32_t half = c.head_dim / 2;
  p.pool.ParallelFor(p.n_tokens, [&](int64_t b, int64_t e, int) {
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
          p.k.rmsnorm(q + h * hd, l.q_norm, c.rms_eps, hd, q + h * hd);
        for (int32_t h = 0; h < c.n_kv_heads; ++h)
          p.k.rmsnorm(k + h * hd, l.k_norm, c.rms_eps, hd, k + h * hd);
      }
      p.k.rope(q, c.n_heads, hd, p.s.rope_cos + t * half, p.s.rope_sin + t * half, interleaved);
      p.k.rope(k, c.n_kv_heads, hd, p.s.rope_cos + t * half, p.s.rope_sin + t * half, interleaved);
    }
  });
  // Append this chunk's keys and values to the cache, then attend: one task per KV head and
  // block of 16 query tokens (a tree batch: per KV head and segment).
  const int64_t n_blocks =
      p.tree != nullptr ? static_cast<int64_t>(p.tree->segments.size()) : (p.n_tokens + 15) / 16;
  const int64_t n_tasks = c.n_kv_heads * n_blocks;
  const int32_t group = c.gqa_group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto store = [&](int64_t g) {
    p.k.kv_store(p.kv.head(layer, static_cast<int32_t>(g)), p.pos0, p.n_tokens, qkv + qd + g * hd,
                 ld, qkv + qd + kvd + g * hd, ld);
  };
  // With one token block per head, a head's task stores its own keys and values first (one
  // parallel region); otherwise every block of a head needs the whole chunk stored before.
  const bool store_in_task = n_blocks == 1 && p.tree == nullptr;
  if (!store_in_task) {
    p.pool.ParallelFor(c.n_kv_heads, [&](int64_t b, int64_t e, int) {
      for (int64_t g = b; g < e; ++g) store(g);
    });
  }
  // Many tokens on a table with a tile engine: the bf16 tile form (kernel_table.h).
  // Tree batches use the general form, which honours the hidden ranges.
  const auto attend =
      p.n_tokens >= kPrefillMinTokens && p.k.prefill_attention != nullptr && p.tree == nullptr
          ? p.k.prefill_attention
          : p.k.attention;
  p.pool.ParallelFor(n_tasks, [&](int64_t b, int64_t e, int thread) {
    for (int64_t task_id = b; task_id < e; ++task_id) {
      const int64_t g = task_id / n_blocks, block = task_id % n_blocks;
      if (store_in_task) store(g);
      AttentionTask task;
      task.q = qkv + g * group * hd;
      task.ldq = ld;
      task.out = p.s.attn + g * group * hd;
      task.ldo = qd;
      task.kv = p.kv.head(layer, static_cast<int32_t>(g));
      task.n_q_heads = group;
      task.pos0 = p.pos0;
      task.t_begin = block * 16;
      task.t_end = std::min<int64_t>(p.n_tokens, block * 16 + 16);
      task.scale = scale;
      if (p.tree != nullptr) {
        const TreeBatch::Segment& seg = p.tree->segments[static_cast<size_t>(block)];
        task.t_begin = seg.t_begin;
        task.t_end = seg.t_end;
        task.hidden_begin = seg.hidden_begin;
        task.hidden_end = seg.hidden_end;
      }
      attend(task, p.thread_scratch(thread));
    }
  });
  Project(p, l.wo, p.s.attn, qd, nullptr, {p.s.x, d, Epilogue::kAccumulate});
}

// x += w_down · (silu(w_gate · norm(x)) * (w_up · norm(x))).
void FeedForwardBlock(const Pass& p, const LayerWeights& l) {
  const ModelConfig& c = p.c;
  const int64_t d = c.d_model, ff = c.d_ff;
  if (l.gate_up.present()) {
    Project(p, l.gate_up, p.s.x, d, l.ffn_norm, {p.s.gate, ff, Epilogue::kSwiGlu});
  } else {
    Project(p, l.w_gate, p.s.x, d, l.ffn_norm, {p.s.gate, ff, Epilogue::kStore});
    Project(p, l.w_up, p.s.x, d, l.ffn_norm, {p.s.up, ff, Epilogue::kStore});
    p.pool.ParallelFor(p.n_tokens, [&](int64_t b, int64_t e, int) {
      p.k.silu_mul(p.s.gate + b * ff, p.s.up + b * ff, (e - b) * ff, p.s.gate + b * ff);
    });
  }
  Project(p, l.w_down, p.s.gate, ff, nullptr, {p.s.x, d, Epilogue::kAccumulate});
}

Status Run(const Model& model, KvCache& kv, ForwardScratch& s, ThreadPool& pool,
           std::span<const int32_t> tokens, int32_t pos0, bool all_positions, float* logits,
           const TreeBatch* tree = nullptr, float* hidden = nullptr) {
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
  Pass p{c, model.weights(), model.kernels(), kv, s, pool, n, pos0, tree};
  POCKET_RETURN_IF_ERROR(Embed(p, tokens));
  RopeTables(model, p);
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = p.w.layers[static_cast<size_t>(layer)];
    AttentionBlock(p, l, layer);
    FeedForwardBlock(p, l);
  }
  if (hidden != nullptr) {
    // [d_model]: the last token's residual stream through the final norm, in float (what a dense
    // output matrix would multiply).
    p.k.rmsnorm(p.s.x + static_cast<size_t>(n - 1) * c.d_model, p.w.output_norm, c.rms_eps,
                c.d_model, hidden);
  }
  if (logits != nullptr) {
    // Final norm and output projection, for the last token or all of them.
    const int32_t first = all_positions ? 0 : n - 1;
    Pass last = p;
    last.n_tokens = n - first;

    Project(last, p.w.output, p.s.x + static_cast<size_t>(first) * c.d_model, c.d_model,
            p.w.output_norm, {logits, c.vocab_size, Epilogue::kStore});
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ForwardScratch> ForwardScratch::Create(const Model& model, int32_t max_batch,
                                                int32_t n_threads) {
  const ModelConfig& c = model.config();
  bool dense = !model.weights().output.packed;
  for (const LayerWeights& l : model.weights().layers) {
    dense |= !l.qkv.present() || !l.gate_up.present() || !l.wo.packed || !l.w_down.packed;
  }
  if (max_batch <= 0) return InvalidArgumentError("batch size must be positive, got ", max_batch);
  if (n_threads <= 0) return InvalidArgumentError("thread count must be positive, got ", n_threads);
  ForwardScratch s;
  s.max_batch_ = max_batch;
  const size_t b = static_cast<size_t>(max_batch);
  const size_t d = static_cast<size_t>(c.d_model), qd = static_cast<size_t>(c.q_dim()),
               kvd = static_cast<size_t>(c.kv_dim()), ff = static_cast<size_t>(c.d_ff),
               half = static_cast<size_t>(c.head_dim / 2);
  const size_t max_cols = std::max({d, qd, ff});
  s.per_thread_floats = static_cast<int64_t>(std::max<size_t>(
      max_cols, static_cast<size_t>(AttentionScratchFloats(c.gqa_group(), c.head_dim))));
  s.per_thread_floats = (s.per_thread_floats + 15) / 16 * 16;
  // Byte sizes of every slice, each rounded up to 64 bytes.
  const size_t sizes[] = {
      b * d * 4, dense ? b * std::max(d, qd) * 4 : 0,
      // The attention block's [qkv | attn] and the FFN's [gate | up] are never live at once: one
      // region holds either.
      std::max(b * (qd + 2 * kvd) * 4 + b * qd * 4, b * ff * 4 * (dense ? 2 : 1)), 0, 0, 0,
      b * max_cols,  // int8 activations
      b * (max_cols / 32) * 4, b * (max_cols / 32) * 4, b * half * 4, b * half * 4,
      static_cast<size_t>(n_threads) * static_cast<size_t>(s.per_thread_floats) * 4};
  size_t total = 0;
  for (size_t n : sizes) total += (n + 63) / 64 * 64;
  s.buffer_.reset(new (std::nothrow) uint8_t[total + 64]);
  if (!s.buffer_)
    return ResourceExhaustedError("cannot allocate forward scratch (", HumanBytes(total), ")");
  s.bytes_ = total;
  uint8_t* base = s.buffer_.get();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  std::vector<uint8_t*> slots;
  for (size_t n : sizes) {
    slots.push_back(base);
    base += (n + 63) / 64 * 64;
  }
  s.x = reinterpret_cast<float*>(slots[0]);
  s.xn = reinterpret_cast<float*>(slots[1]);
  s.qkv = reinterpret_cast<float*>(slots[2]);
  s.attn = s.qkv + b * (qd + 2 * kvd);
  s.gate = reinterpret_cast<float*>(slots[2]);
  s.up = dense ? s.gate + b * ff : nullptr;
  s.quant.q = reinterpret_cast<int8_t*>(slots[6]);
  s.quant.scale = reinterpret_cast<float*>(slots[7]);
  s.quant.sum = reinterpret_cast<float*>(slots[8]);
  s.rope_cos = reinterpret_cast<float*>(slots[9]);
  s.rope_sin = reinterpret_cast<float*>(slots[10]);
  s.thread_scratch = reinterpret_cast<float*>(slots[11]);
  return s;
}

Status Prefill(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
               std::span<const int32_t> tokens, int32_t pos0, bool all_positions, float* logits) {
  return Run(model, kv, scratch, pool, tokens, pos0, all_positions, logits);
}

Status PrefillHidden(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
                     std::span<const int32_t> tokens, int32_t pos0, float* hidden) {
  if (hidden == nullptr) return InvalidArgumentError("PrefillHidden: no output buffer");
  return Run(model, kv, scratch, pool, tokens, pos0, false, nullptr, nullptr, hidden);
}

Status PrefillTree(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
                   const TreeBatch& batch, int32_t pos0, float* logits) {
  const int32_t n = static_cast<int32_t>(batch.tokens.size());
  if (batch.rope_pos.size() != batch.tokens.size()) {
    return InvalidArgumentError("tree batch: ", batch.rope_pos.size(), " positions for ", n,
                                " tokens");
  }
  int32_t next = 0;
  for (const TreeBatch::Segment& seg : batch.segments) {
    if (seg.t_begin != next || seg.t_end <= seg.t_begin || seg.t_end - seg.t_begin > 16 ||
        seg.t_end > n || seg.hidden_begin < 0 || seg.hidden_begin > seg.hidden_end ||
        seg.hidden_end > pos0 + seg.t_begin) {
      return InvalidArgumentError("tree batch: bad segment [", seg.t_begin, ", ", seg.t_end,
                                  ") hiding [", seg.hidden_begin, ", ", seg.hidden_end, ")");
    }
    next = seg.t_end;
  }
  if (next != n) return InvalidArgumentError("tree batch: segments cover ", next, " of ", n);
  return Run(model, kv, scratch, pool, batch.tokens, pos0, true, logits, &batch);
}

Status Decode(const Model& model, KvCache& kv, ForwardScratch& scratch, ThreadPool& pool,
              int32_t token, int32_t pos, float* logits) {
  return Run(model, kv, scratch, pool, std::span<const int32_t>(&token, 1), pos, false, logits);
}

}  // namespace pocket
