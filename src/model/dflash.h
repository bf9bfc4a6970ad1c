// The block drafter of DFlash (speculative decoding): a few Qwen3 layers that propose a block of
// tokens in one pass, conditioned on the target model's hidden states.
//
// The released format is a Hugging Face directory: config.json (architectures
// ["DFlashDraftModel"], Qwen3 layer fields, block_size, dflash_config {mask_token_id,
// target_layer_ids}) and safetensors tensors fc.weight, hidden_norm.weight, norm.weight and
// layers.{i}.* as in Qwen3. There is no embedding and no output matrix: those are the target's.
//
// Semantics:
//   - context features: for each committed token (positions 0..n-1), the target's residual stream
//     after each layer of target_layer_ids (0-based: HF hidden_states[id + 1]), concatenated in
//     that order -> fc -> RMSNorm(hidden_norm) = ctx[pos]. They are not run through the layers;
//   - the block: B rows [the pending token at position n, mask_token_id x (B - 1)] at positions
//     n..n+B-1, embedded with the target's token embedding;
//   - each layer (pre-norm): h = input_layernorm(x); Q from h; K and V from [ctx ; h] (no
//     input_layernorm on ctx), per-head q_norm / k_norm, RoPE at absolute positions; every block
//     row sees all context rows and all B block rows (bidirectional); x += o_proj(attention);
//     x += down(silu(gate(post_attention_layernorm(x))) * up(...));
//   - logits = target_output(norm(x)); row j (1..B-1) predicts the token at position n + j.
//
// The context K/V of every drafter layer depend only on the committed tokens, so they are computed
// once per token (AppendContext) and kept in the state's own KV cache; the block's rows are
// scratch slots just past the context, overwritten by every pass.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "format/hf_directory.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/scratch.h"
#include "model/weights.h"
#include "quant/dtype.h"

namespace pocket {

// How the drafter's matrices are kept in memory.
enum class DFlashWeights : uint8_t {
  kFloat,  // as stored (f32 / f16 / bf16), float kernels: the fidelity path
  kInt8,   // packed 8-bit symmetric, group 32: int8 kernels
  kInt4,   // packed 4-bit with minimum, group 64 (32 where 64 does not divide): int4 kernels
};
std::string_view DFlashWeightsName(DFlashWeights w);
bool ParseDFlashWeights(std::string_view name, DFlashWeights* out);

struct DFlashLoadOptions {
  DFlashWeights weights = DFlashWeights::kFloat;
};

// The drafter a .pocket package carries (`pocket convert --drafter DIR`; docs/format.md, "Block
// drafter"): the meta key "drafter" (an object: the config.json fields pocket reads, plus
// "weights") and tensors named "drafter." + the released names ("drafter.fc.weight",
// "drafter.layers.0.self_attn.q_proj.weight", ...), in the form the kernels run.
inline constexpr char kPocketDrafterKey[] = "drafter";
inline constexpr char kPocketDrafterTensorPrefix[] = "drafter.";

struct DFlashConfig {
  // The drafter's layers as a Qwen3 config (qk_norm, neox RoPE); vocab_size is the target's.
  ModelConfig layers;
  int32_t block_size = 0;
  int32_t mask_token_id = 0;
  std::vector<int32_t> target_layer_ids;
  int32_t target_d_model = 0;  // columns of fc: target_layer_ids.size() * target_d_model
};

struct DFlashLayerWeights {
  const float* attn_norm = nullptr;  // input_layernorm [d_model]
  Linear wq, wk, wv, wo;
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;  // post_attention_layernorm [d_model]
  Linear w_gate, w_up, w_down;
};

// A loaded drafter, bound to its target (whose embedding and output matrix it uses). Immutable;
// shared by any number of states on any threads.
class DFlashDrafter {
 public:
  // Errors name the field or tensor: wrong architectures, missing or malformed fields, missing
  // tensors, wrong shapes (expected and found), mask_token_id outside the target's vocabulary,
  // a target layer id past the target's depth, a hidden or vocabulary size unlike the target's,
  // block_size < 2.
  static StatusOr<std::shared_ptr<const DFlashDrafter>> Load(const std::string& dir,
                                                             std::shared_ptr<const Model> target,
                                                             const DFlashLoadOptions& options = {});
  // The drafter stored in the target's own .pocket package, bound to that model: matrices and
  // norms are views into the model's mapping (nothing is quantized or copied), so the logits are
  // those of Load(dir, target, {the stored weights kind}) bit for bit. NotFound when the model is
  // not a package or its package holds no drafter (HasPackagedDrafter); otherwise the checks of
  // Load against the target, with errors naming the meta key ("<file> (meta drafter): ...") or
  // the tensor ("drafter.layers.1.mlp.up_proj.weight").
  static StatusOr<std::shared_ptr<const DFlashDrafter>> LoadFromModel(
      std::shared_ptr<const Model> target);

  const DFlashConfig& config() const { return config_; }
  const Model& target() const { return *target_; }
  int32_t block_size() const { return config_.block_size; }
  int32_t mask_token_id() const { return config_.mask_token_id; }
  // The target layers whose outputs the context features are made of, in fc's column order (a
  // ForwardBatch::hidden_layers list).
  std::span<const int32_t> target_layer_ids() const { return config_.target_layer_ids; }
  DFlashWeights weights_kind() const { return weights_kind_; }
  // Bytes of the drafter's own matrices as used (packed or as stored).
  size_t weight_bytes() const;

  // The package form of this drafter (what `pocket convert --drafter` writes): the meta object, as
  // JSON text, and the tensors in writing order with their package names; each is a matrix (in
  // the form used: packed, or dense as stored) or an f32 vector of n elements. Views into this
  // drafter: valid while it lives.
  struct PackageTensor {
    std::string name;
    const Linear* matrix = nullptr;
    const float* vector = nullptr;
    int64_t n = 0;
  };
  std::string PackageConfigJson() const;
  std::vector<PackageTensor> PackageTensors() const;

  // Internal to dflash.cc (the pass reads them).
  const Linear& fc() const { return fc_; }
  const float* hidden_norm() const { return hidden_norm_; }
  const float* output_norm() const { return norm_; }
  const std::vector<DFlashLayerWeights>& layers() const { return layers_; }
  const std::vector<double>& rope_inv_freq() const { return rope_inv_freq_; }

 private:
  DFlashDrafter() = default;
  // Calls matrix(name, rows, cols, Linear&) and vector(name, n, const float*&) for every tensor
  // in the released names and order (Self: DFlashDrafter or const DFlashDrafter); stops at the
  // first error.
  template <typename Self, typename MatrixFn, typename VectorFn>
  static Status VisitTensors(Self& self, MatrixFn&& matrix, VectorFn&& vector);
  void InitRope();
  std::shared_ptr<const Model> target_;
  std::unique_ptr<HfDirectory> hf_;  // the mapping the dense matrices view
  DFlashConfig config_;
  DFlashWeights weights_kind_ = DFlashWeights::kFloat;
  Linear fc_;
  const float* hidden_norm_ = nullptr;
  const float* norm_ = nullptr;
  std::vector<DFlashLayerWeights> layers_;
  std::vector<std::unique_ptr<float[]>> owned_floats_;    // 1-D tensors as f32, aligned copies
  std::vector<std::unique_ptr<uint8_t[]>> owned_packed_;  // packed matrices
  std::vector<double> rope_inv_freq_;
};

// One drafting context: the drafter's KV cache of the committed tokens (n_ctx of them at most)
// plus the block's scratch slots, and every buffer a pass needs, allocated once (nothing is
// allocated per block). Not thread-safe; the pool is shared and must outlive the state.
class DFlashState {
 public:
  static StatusOr<DFlashState> Create(std::shared_ptr<const DFlashDrafter> drafter, int32_t n_ctx,
                                      ThreadPool* pool, KvType kv_type = KvType::kF16);
  DFlashState(DFlashState&&) = default;
  DFlashState& operator=(DFlashState&&) = default;

  // Cuts the context back to pos committed tokens (pos <= context_length()), then appends n
  // tokens at positions pos..pos+n-1 from the target's hidden states: hidden[j * layer_stride +
  // i * target_d_model + c] is channel c of token pos + i after target layer target_layer_ids()[j]
  // (ForwardBatch::layer_hidden with layer_stride = output rows * d_model). n = 0 only cuts.
  Status AppendContext(int32_t pos, int32_t n, const float* hidden, int64_t layer_stride);
  // Drafts the block [last_token, mask x (B - 1)] at position context_length(): draft receives the
  // argmax tokens of rows 1..min(B - 1, max_tokens) (its capacity is kept: no allocation once
  // reserved); logits_out, when given, all B rows' logits [B, vocab].
  Status DraftBlock(int32_t last_token, int32_t max_tokens, std::vector<int32_t>* draft,
                    float* logits_out = nullptr);

  int32_t context_length() const { return n_past_; }
  int32_t n_ctx() const { return n_ctx_; }
  const DFlashDrafter& drafter() const { return *drafter_; }
  size_t bytes() const { return kv_.bytes() + scratch_bytes_; }

 private:
  DFlashState(std::shared_ptr<const DFlashDrafter> drafter, KvCache kv)
      : drafter_(std::move(drafter)), kv_(std::move(kv)) {}
  std::shared_ptr<const DFlashDrafter> drafter_;
  KvCache kv_;
  ThreadPool* pool_ = nullptr;
  int32_t n_ctx_ = 0;
  int32_t n_past_ = 0;
  int32_t max_rows_ = 0;  // rows per pass (context chunk or block)
  // The regions of one buffer: the projection helpers' view (xn, quant, per-thread), and ours.
  std::unique_ptr<ForwardScratch> fs_;
  std::unique_ptr<uint8_t[]> buffer_;
  size_t scratch_bytes_ = 0;
  float* features_ = nullptr;  // [max_rows, n_ids * target_d_model]
  float* logits_ = nullptr;    // [B, vocab]
};

// Whether the model was loaded from a .pocket package whose meta holds a drafter (cheap: one key
// lookup; LoadFromModel validates).
bool HasPackagedDrafter(const Model& model);

// A synthetic drafter (random weights, deterministic for the seed) in the released layout for a
// target of config `target`.
struct DFlashSyntheticOptions {
  ModelConfig target;
  int32_t n_layers = 2;
  int32_t block_size = 9;
  int32_t mask_token_id = -1;             // -1: target vocab_size - 1
  std::vector<int32_t> target_layer_ids;  // empty: DefaultTargetLayerIds
  DType weight_type = DType::kF32;        // f32, f16 or bf16
  uint64_t seed = 1;
  std::vector<std::string> input_paths;  // files the output must never overwrite
};
// Up to three layers spread over the target's depth: 1, L/2 and L-2 (distinct, within [0, L)),
// topped up from the deepest layers when fewer, ascending.
std::vector<int32_t> DefaultTargetLayerIds(int32_t n_target_layers);
// Writes config.json and model.safetensors into the existing directory dir.
Status WriteSyntheticDFlashDrafter(const DFlashSyntheticOptions& options, const std::string& dir);

}  // namespace pocket
