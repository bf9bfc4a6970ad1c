// The one place the forward pass gets its arithmetic from: a table of function pointers chosen
// once from the CPU's features (SelectKernels). Everything above this layer calls through the
// table; ISA-specific code lives only in kernels/x86 and kernels/arm.
//
// Every table computes the same results as the scalar reference table, bit for bit, for the
// integer paths (quantize_rows, packed_gemm) and the dense path (dense_gemm): float reductions
// follow one canonical order (16 interleaved partial sums, combined as a fixed tree; see
// reference/canonical.h), which every ISA can reproduce. Attention uses exp(), whose vector
// approximations differ from std::exp, and is checked against the reference with a tolerance.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "quant/dtype.h"
#include "quant/packed.h"

namespace pocket {

// A dense weight matrix [rows = out_features, cols = in_features], row-major in its stored type
// (f32, f16, bf16, or a GGUF block type): a view into the mapped model file.
struct WeightMatrix {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  // Q8_0 only: the bytes from one block of a row (32 values) to the row's next block. 0: the
  // rows are stored whole (34). A LoRA B^T may instead be stored blocked, the blocks of every
  // rank row for each 32 outputs together (row_bytes 34, block_stride rows * 34), so that any
  // range of outputs is one stream in memory.
  size_t block_stride = 0;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  size_t q8_block_step() const { return block_stride != 0 ? block_stride : 34; }
};

// Activations quantized to int8, one scale per group of `group` columns (the group of the packed
// matrix they multiply): x[t][k] ~= scale[t][g] * q[t][k].
struct QuantizedRows {
  int8_t* q = nullptr;     // [n_tokens, cols]
  float* scale = nullptr;  // [n_tokens, n_groups]
  float* sum = nullptr;    // [n_tokens, n_groups]: sum of q over the group (an exact integer)
  int64_t n_tokens = 0;
  int64_t cols = 0;
  int32_t group = 32;
  int64_t n_groups() const { return cols / group; }
};

enum class Epilogue : uint8_t {
  kStore,       // y[t][r] = (W x)[r]
  kAccumulate,  // y[t][r] += (W x)[r]  (a residual connection)
  kSwiGlu,      // rows come in panel pairs (gate panel, up panel): y[t][16 i + j] =
                // silu(gate row 32 i + j) * (up row 32 i + 16 + j); output has rows / 2 columns
};

struct GemmOut {
  float* y = nullptr;
  int64_t ld = 0;  // row stride of y, in floats
  Epilogue epilogue = Epilogue::kStore;
  // An optional term added to the matrix product before the epilogue (a LoRA delta B(Ax), ...):
  // [n_tokens rows, row stride ld_add] indexed by logical output. kStore: y[t][r] = (W x)[r] +
  // add[t][r]; kAccumulate: y[t][r] = y[t][r] + ((W x)[r] + add[t][r]); kSwiGlu (rows / 2 output
  // columns j): gate_j + add[t][j] and up_j + add[t][rows / 2 + j] before silu(gate) * up.
  // Null: no term (the results are exactly those without it).
  const float* add = nullptr;
  int64_t ld_add = 0;  // row stride of add, in floats
};

// KV cache storage of one layer and KV head. K is blocked by 16 positions and transposed inside a
// block ([n_ctx / 16][head_dim][16]) so 16 scores come from one pass over the block; V is
// row-major ([n_ctx][head_dim]). kQ8 keeps one f32 scale per position for K and for V. The cache
// holds whole blocks of 16 positions, so kernels may read whole blocks (and whole 16-entry scale
// runs) past the last valid position; those values are masked out.
enum class KvType : uint8_t { kF32 = 0, kF16 = 1, kQ8 = 2 };
std::string_view KvTypeName(KvType type);
bool ParseKvType(std::string_view name, KvType* out);
size_t KvElementBytes(KvType type);

// The element type of a cache of type kType, as KvHeadView's accessors take it: float (kF32),
// uint16_t (kF16 bits), int8_t (kQ8).
template <KvType kType>
using KvElement = std::conditional_t<kType == KvType::kF32, float,
                                     std::conditional_t<kType == KvType::kF16, uint16_t, int8_t>>;

// Positions per K block (K is transposed inside a block: row d holds dimension d of its positions).
inline constexpr int64_t kKvBlockPositions = 16;
// Blocks per page of a paged cache (model/kv_cache.h), and its positions: long enough runs of one
// head's K blocks and V rows that the hardware prefetchers stream them (16-position pages measured
// 3-4% slower decode than a contiguous cache).
inline constexpr int64_t kKvPageBlocks = 4;
inline constexpr int64_t kKvPagePositions = kKvPageBlocks * kKvBlockPositions;

// The KV layout accessors are forced inline (plain integer arithmetic): never an out-of-line copy
// that an ISA translation unit could emit and the linker pick for generic code.
#define POCKET_KV_ACCESSOR __attribute__((always_inline)) inline

struct KvHeadView {
  KvType type = KvType::kF16;
  int32_t head_dim = 0;
  void* k = nullptr;
  void* v = nullptr;
  float* k_scale = nullptr;  // kQ8 only: [n_ctx]
  float* v_scale = nullptr;
  // A paged cache (model/kv_cache.h): pages[p] holds the kKvPageBlocks blocks of positions
  // [64 p, 64 p + 64) of every layer and head; this head's K blocks are consecutive from byte
  // page_k of it, its 64 V rows from page_v, the kQ8 scales from page_ks and page_vs (64 floats
  // each). Null: the contiguous k, v and scales above (views made by hand: kernel tests).
  uint8_t* const* pages = nullptr;
  int64_t page_k = 0, page_v = 0, page_ks = 0, page_vs = 0;
  // Blocks from `tail_block` on are read from a separate tail (same layout, its block 0 being
  // block tail_block): a draft branch of a tree sees its ancestors' rows gathered there at their
  // logical positions, so every kernel computes exactly what it computes for the same rows in
  // consecutive slots (kernels never learn about trees). Default: no tail.
  int64_t tail_block = INT64_MAX / kKvBlockPositions;
  void* tail_k = nullptr;
  void* tail_v = nullptr;
  float* tail_k_scale = nullptr;
  float* tail_v_scale = nullptr;

  // The one place that knows where the cache's blocks and rows live: every kernel addresses K, V
  // and the kQ8 scales through these (a block table for a paged cache changes only them).
  // Addresses are computed in bytes from `type`'s element size; T is only the pointer type
  // returned: KvElement<type> (possibly const), or char / uint8_t for byte addresses (prefetches).

  // Bytes of one K or V element.
  POCKET_KV_ACCESSOR constexpr int64_t ElementBytes() const {
    return type == KvType::kF32 ? 4 : type == KvType::kF16 ? 2 : 1;
  }
  // Bytes of one K block (head_dim rows of 16 positions); also the bytes of a block's 16 V rows.
  POCKET_KV_ACCESSOR constexpr int64_t BlockBytes() const {
    return int64_t{head_dim} * kKvBlockPositions * ElementBytes();
  }
  // K block `block` (positions [16 block, 16 block + 16)): [head_dim][16] elements.
  template <typename T>
  POCKET_KV_ACCESSOR T* KeyBlock(int64_t block) const {
    if (block >= tail_block) {
      return reinterpret_cast<T*>(static_cast<uint8_t*>(tail_k) +
                                  (block - tail_block) * BlockBytes());
    }
    if (pages != nullptr) {
      return reinterpret_cast<T*>(pages[block / kKvPageBlocks] + page_k +
                                  (block % kKvPageBlocks) * BlockBytes());
    }
    return reinterpret_cast<T*>(static_cast<uint8_t*>(k) + block * BlockBytes());
  }
  // Row d of K block `block`: 16 elements, one per position of the block.
  template <typename T>
  POCKET_KV_ACCESSOR T* KeyRow(int64_t block, int64_t d) const {
    return reinterpret_cast<T*>(KeyBlock<uint8_t>(block) + d * kKvBlockPositions * ElementBytes());
  }
  // V row of position pos: head_dim elements (the rows of one block are consecutive).
  template <typename T>
  POCKET_KV_ACCESSOR T* ValueRow(int64_t pos) const {
    if (pos >= tail_block * kKvBlockPositions) {
      return reinterpret_cast<T*>(static_cast<uint8_t*>(tail_v) +
                                  (pos - tail_block * kKvBlockPositions) * head_dim *
                                      ElementBytes());
    }
    if (pages != nullptr) {
      return reinterpret_cast<T*>(pages[pos / kKvPagePositions] + page_v +
                                  (pos % kKvPagePositions) * head_dim * ElementBytes());
    }
    return reinterpret_cast<T*>(static_cast<uint8_t*>(v) + pos * head_dim * ElementBytes());
  }
  // kQ8: the 16 K / V scales of block `block`, and the scale of position pos.
  POCKET_KV_ACCESSOR float* KeyScales(int64_t block) const { return KeyScale(block * 16); }
  POCKET_KV_ACCESSOR float* ValueScales(int64_t block) const { return ValueScale(block * 16); }
  POCKET_KV_ACCESSOR float* KeyScale(int64_t pos) const {
    return pos >= tail_block * kKvBlockPositions
               ? tail_k_scale + (pos - tail_block * kKvBlockPositions)
           : pages != nullptr ? reinterpret_cast<float*>(pages[pos / kKvPagePositions] + page_ks) +
                                    pos % kKvPagePositions
                              : k_scale + pos;
  }
  POCKET_KV_ACCESSOR float* ValueScale(int64_t pos) const {
    return pos >= tail_block * kKvBlockPositions
               ? tail_v_scale + (pos - tail_block * kKvBlockPositions)
           : pages != nullptr ? reinterpret_cast<float*>(pages[pos / kKvPagePositions] + page_vs) +
                                    pos % kKvPagePositions
                              : v_scale + pos;
  }
};
#undef POCKET_KV_ACCESSOR

// Causal attention of query tokens [t_begin, t_end) (token t at absolute position pos0 + t) over
// cache positions [0, pos0 + t], for the n_q_heads query heads that share one KV head.
struct AttentionTask {
  const float* q =
      nullptr;  // token t, head h: q + t * ldq + h * head_dim (h relative to the group)
  int64_t ldq = 0;
  float* out = nullptr;  // same indexing with ldo
  int64_t ldo = 0;
  KvHeadView kv;
  int32_t n_q_heads = 1;
  int64_t pos0 = 0;
  int64_t t_begin = 0;
  int64_t t_end = 0;
  float scale = 1.0f;
  // Tree attention (candidates scored in one pass): positions in [hidden_begin, hidden_end) are
  // invisible to the task's tokens. Both 0: plain causal attention.
  int64_t hidden_begin = 0;
  int64_t hidden_end = 0;
  // Bidirectional attention within a segment (block drafters): every token of the task sees
  // positions [0, visible_end) (minus the hidden range), its later tokens included. 0: causal.
  int64_t visible_end = 0;
};

// One past the last position token t of a task sees: its own (causal), or the task's visible end.
inline int64_t VisibleEnd(const AttentionTask& task, int64_t t) {
  return task.visible_end > 0 ? task.visible_end : task.pos0 + t + 1;
}

// The positions of 16-position block b that a token seeing [0, n_pos) minus the task's hidden
// range sees: bit j for position 16 b + j (0: none; then the block must be skipped).
inline uint32_t VisibleLanes(const AttentionTask& task, int64_t b, int64_t n_pos) {
  const int64_t valid = n_pos - 16 * b;
  if (valid <= 0) return 0;
  uint32_t lanes = valid >= 16 ? 0xffffu : (1u << valid) - 1u;
  const int64_t lo = task.hidden_begin - 16 * b > 0 ? task.hidden_begin - 16 * b : 0;
  const int64_t hi = task.hidden_end - 16 * b < 16 ? task.hidden_end - 16 * b : 16;
  if (lo < hi) lanes &= ~(((1u << (hi - lo)) - 1u) << lo);
  return lanes;
}
// One past the last visible position of a block (the rows a kernel must load).
inline int64_t LanesExtent(uint32_t lanes) {
  return lanes == 0 ? 0 : 32 - __builtin_clz(lanes);
}

// Scratch floats an attention call (either form) needs (a task covers at most 16 query tokens).
inline int64_t AttentionScratchFloats(int32_t n_q_heads, int32_t head_dim) {
  return 16 * int64_t{n_q_heads} * (2 * int64_t{head_dim} + 48) + 64 * int64_t{head_dim} + 1024;
}

struct KernelTable {
  std::string_view name;

  // x: [n_tokens, cols] with row stride ldx -> out (sized by the caller for n_tokens, cols,
  // out->group). When norm_weight is given, each row is RMS-normalized first (eps), exactly as
  // rmsnorm below normalizes it: quantizing rmsnorm's output without norm_weight gives the same
  // bits (callers that need the normalized row anyway, a LoRA term's input, normalize once).
  void (*quantize_rows)(const float* x, int64_t ldx, int64_t n_tokens, int64_t cols,
                        const float* norm_weight, float eps, QuantizedRows* out);

  // Panels [panel_begin, panel_end) of w times the quantized activations, for all a.n_tokens.
  // y[t][r] = sum_g a.scale[t][g] * (d[r][g] * sum_k code * q + m[r][g] * a.sum[t][g]).
  // For kSwiGlu the range must cover whole (gate, up) panel pairs.
  void (*packed_gemm)(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                      int64_t panel_end, const GemmOut& out);

  // The prefill form of packed_gemm for many tokens, where weights are requantized on the fly.
  // For every row r: amax = the largest |m| or |d * c_max + m| over the row's groups (c_max = 15
  // or 255: the group's representable range), inv = 127 / amax, D = amax / 127, and each weight
  // becomes q' = clamp(nearbyint(a * code + b), -127, 127) with a = d * inv, b = m * inv (per
  // group; multiply, then add). Activations are quantized per block of a.group columns (a multiple
  // of the packed group dividing the columns; a.sum unused). Then y[t][r] = D * acc, where acc is
  // the sum over blocks b, in order, of fma((float) sum_k q' * a.q, a.scale[t][b], acc) (the first
  // block: a plain product). Integer accumulation over whole blocks lets tile engines (AMX) run
  // without a float epilogue after every group, and one scale per row keeps the epilogue of a
  // block to one multiply-add per output. Null in tables without such an engine.
  void (*prefill_gemm)(const PackedMatrix& w, const QuantizedRows& a, int64_t panel_begin,
                       int64_t panel_end, const GemmOut& out);

  // Rows [row_begin, row_end) of a dense matrix times float activations x [n_tokens, w.cols]
  // (row stride ldx). scratch: DenseGemmScratchFloats(w.cols) floats (rows dequantized or
  // converted to floats, up to four at a time).
  static constexpr int64_t DenseGemmScratchFloats(int64_t cols) {
    return 4 * ((cols + 15) / 16 * 16);
  }
  void (*dense_gemm)(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                     int64_t row_begin, int64_t row_end, const GemmOut& out, float* scratch);
  // The output step of a LoRA term: y[t * ldy + o] += sum over r < bt.rows of
  // m[t * ldm + r] * bt[r][o], for outputs [o_begin, o_end) and n tokens; bt [rank, outputs] in
  // f32, bf16, f16 or Q8_0 (the B factor, transposed). Each r is a multiply then an add, in rank
  // order: the same bits on every table. accumulate false: y is not read, the sum starts from +0
  // (exactly what zeroing y first and accumulating gives, without the zeroing pass).
  void (*lora_expand)(const WeightMatrix& bt, const float* m, int64_t ldm, int64_t n,
                      int64_t o_begin, int64_t o_end, float* y, int64_t ldy,
                      bool accumulate) = nullptr;

  // y = x / sqrt(mean(x^2) + eps) * weight, over n elements (y may alias x).
  void (*rmsnorm)(const float* x, const float* weight, float eps, int64_t n, float* y);

  // In place on x: [n_heads, head_dim]. cos/sin: [head_dim / 2] for this position.
  // interleaved: pairs (x[2i], x[2i+1]); else (x[i], x[i + head_dim/2]).
  void (*rope)(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin,
               bool interleaved);

  // out[i] = silu(gate[i]) * up[i].
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);

  // Writes keys and values of positions [pos, pos + n) (rows of head_dim floats, row strides
  // ldk, ldv) into one KV head's cache.
  void (*kv_store)(const KvHeadView& kv, int64_t pos, int64_t n, const float* k, int64_t ldk,
                   const float* v, int64_t ldv);

  void (*attention)(const AttentionTask& task, float* scratch);

  // The prefill form of attention on a tile engine (null where a table has none): what
  // reference::PrefillAttentionBf16 defines, i.e. attention with q * scale, K and V rounded to
  // bf16, positions taken in chunks of 32, each chunk's scores in fp32 with the online softmax, and
  // the chunk's probabilities rounded to bf16 before they weight V (fp32 sums). Tasks it does not
  // take (other than an f16 KV cache, head sizes not a multiple of 32, a last block of fewer than
  // 16 tokens) go to `attention`. Causal tasks only (visible_end 0): the forward sends others to
  // `attention`. The forward uses it for chunks of many tokens only; decode keeps
  // the fp32 `attention`.
  void (*prefill_attention)(const AttentionTask& task, float* scratch) = nullptr;

  // Machine ceilings for `pocket bench`, measured with this table's instructions:
  // reads n_bytes (a multiple of 64) as fast as possible and returns a value that depends on every
  // byte, so the reads cannot be optimized away;
  uint64_t (*stream_read)(const uint8_t* data, size_t n_bytes);
  // the same bytes read as two halves at once with software prefetch a few KB ahead of each (the
  // x86 decode kernels' pattern: 4 KB ahead; null where the table has none).
  // Plain sequential reads are the usual stream figure; on the development machine this one
  // streams more;
  uint64_t (*stream_read_prefetched)(const uint8_t* data, size_t n_bytes) = nullptr;
  // runs int8 multiply-adds from registers only (the instruction the packed matmul uses: VNNI dot
  // products, AMX tiles, ...) for about `seconds` on the calling thread; returns MACs per second.
  double (*int8_peak)(double seconds);

  // log(sum(exp(x[i]))) over n > 0 values (the normalizer of a log-softmax; candidate scoring
  // takes one per scored token over the whole vocabulary). Null: the reference's.
  double (*log_sum_exp)(const float* x, int64_t n) = nullptr;
};

// The scalar reference table: the ground truth every other table is tested against.
const KernelTable& ReferenceKernels();

// log(sum(exp(x[i]))) with the table's log_sum_exp, or the reference's where it has none.
double LogSumExp(const KernelTable& k, const float* x, int64_t n);

}  // namespace pocket
