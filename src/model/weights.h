// The model's weights bound by name from a ModelSource: matrices stay views into the mapped file
// in their stored type (the kernels consume them as they are); small 1-D tensors (norms, biases)
// are converted to f32 once into buffers the model owns.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "format/model_source.h"
#include "kernels/kernel_table.h"
#include "model/config.h"

namespace pocket {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [d_model]
  WeightMatrix wq, wk, wv;           // [q_dim | kv_dim, d_model]
  const float* bq = nullptr;         // [q_dim] (qwen2)
  const float* bk = nullptr;         // [kv_dim]
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // [head_dim] (qwen3)
  const float* k_norm = nullptr;
  WeightMatrix wo;                  // [d_model, q_dim]
  const float* ffn_norm = nullptr;  // [d_model]
  WeightMatrix w_gate, w_up;        // [d_ff, d_model]
  WeightMatrix w_down;              // [d_model, d_ff]
};

struct ModelWeights {
  WeightMatrix token_embd;  // [vocab, d_model]
  WeightMatrix output;      // [vocab, d_model]; the embedding when tied
  const float* output_norm = nullptr;
  std::vector<LayerWeights> layers;
  // Owned f32 copies of the 1-D tensors (counted in owned_bytes).
  std::vector<std::unique_ptr<float[]>> owned;
  size_t owned_bytes = 0;
  size_t mapped_bytes = 0;  // bytes of matrices used in place from the file
};

// Binds and shape-checks every tensor the config calls for. Names are canonical (GGUF style); for
// Hugging Face sources they are translated by the table in weights.cc.
StatusOr<ModelWeights> BindWeights(const ModelSource& source, const ModelConfig& config);

// The Hugging Face name of a canonical tensor name ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); empty if there is none.
std::string HfTensorName(const std::string& canonical);

}  // namespace pocket
