// The model's weights bound by name from a ModelSource. A matrix is a Linear: either dense (a view
// into the mapped file in its stored type, multiplied with float activations) or packed (the
// integer panel layout of quant/packed.h, multiplied with int8 activations). GGUF Q4_0, Q4_1 and
// Q8_0 matrices are repacked once at load into one buffer (exactly: same values), fusing Q/K/V
// into one matrix and interleaving gate/up panels; the source pages are then released. Small 1-D
// tensors (norms, biases) are converted to f32 once.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/model_source.h"
#include "kernels/kernel_table.h"
#include "model/config.h"

namespace pocket {

struct Linear {
  bool packed = false;
  PackedMatrix p;  // when packed
  WeightMatrix w;  // when dense

  bool present() const { return packed ? p.data != nullptr : w.data != nullptr; }
  int64_t rows() const { return packed ? p.layout.rows : w.rows; }
  int64_t cols() const { return packed ? p.layout.cols : w.cols; }
  // Bytes a full pass over the matrix reads.
  size_t bytes() const {
    return packed ? p.layout.total_bytes() : w.row_bytes * static_cast<size_t>(w.rows);
  }
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [d_model]
  Linear qkv;                        // packed [q_dim + 2 kv_dim, d_model], rows q | k | v
  Linear wq, wk, wv;                 // dense (when qkv is not packed)
  const float* bq = nullptr;         // [q_dim] (qwen2)
  const float* bk = nullptr;         // [kv_dim]
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // [head_dim] (qwen3)
  const float* k_norm = nullptr;
  Linear wo;                        // [d_model, q_dim]
  const float* ffn_norm = nullptr;  // [d_model]
  Linear gate_up;                   // packed [2 d_ff, d_model], (gate, up) panel pairs
  Linear w_gate, w_up;              // dense [d_ff, d_model] (when gate_up is not packed)
  Linear w_down;                    // [d_model, d_ff]
};

struct ModelWeights {
  Linear token_embd;  // [vocab, d_model]
  Linear output;      // [vocab, d_model]; the embedding when tied
  const float* output_norm = nullptr;
  std::vector<LayerWeights> layers;
  // Owned f32 copies of the 1-D tensors.
  std::vector<std::unique_ptr<float[]>> owned;
  size_t owned_bytes = 0;
  // Repacked matrices (GGUF block types), one buffer.
  std::unique_ptr<uint8_t[]> repacked;
  size_t repacked_bytes = 0;
  size_t mapped_bytes = 0;  // bytes of matrices used in place from the file

  // Bytes read by one decode step over all matrices (the embedding row aside).
  size_t decode_weight_bytes() const;
  // The lowest and highest address of those matrices' bytes (null, null when there are none).
  std::pair<const uint8_t*, const uint8_t*> decode_weight_span() const;
};

struct BindOptions {
  // Repack GGUF Q4_0 / Q4_1 / Q8_0 into the packed layout (the fast integer kernels). When
  // false, every matrix stays dense and runs through the float kernels (the oracle path).
  bool repack = true;
  // Ask for huge pages under the matrices a decode step reads in full (AdviseHugePages): the
  // repacked buffer, and the mapped file's matrices where the file system allows.
  bool huge_pages = true;
};

// Binds and shape-checks every tensor the config calls for. Names are canonical (GGUF style); for
// Hugging Face sources they are translated by the table in weights.cc.
StatusOr<ModelWeights> BindWeights(const ModelSource& source, const ModelConfig& config,
                                   const BindOptions& options = {});

// The Hugging Face name of a canonical tensor name ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); empty if there is none.
std::string HfTensorName(const std::string& canonical);

}  // namespace pocket
