// The helpers the adapter formats share (src/model/adapter*.cc): target shapes, tensor names of
// PEFT and llama.cpp, the package's shape keys. Not part of the model layer's interface.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/hf_directory.h"
#include "format/tensor_info.h"
#include "kernels/kernel_table.h"
#include "model/adapter.h"

namespace pocket::adapter_detail {

// llama.cpp's tensor names of the targets.
constexpr std::array<std::string_view, kLoraAllTargets> kGgufNames = {
    "attn_q", "attn_k",   "attn_v",     "attn_output", "ffn_gate",
    "ffn_up", "ffn_down", "token_embd", "output"};

// [out, in] of a target's base matrix.
std::pair<int64_t, int64_t> TargetShape(const ModelConfig& c, LoraTarget t);
// The value of a pattern dict (rank_pattern, alpha_pattern) for a module (PEFT's matching).
bool PatternValue(const ConfigValue* pattern, const std::string& module, double* out);
// "base_model.model.model.layers.N.<module>.lora_{A,B}.weight" (and the embedding's and output
// matrix's names, layer -1): layer, target, which. False for names of another shape.
bool ParsePeftName(std::string_view name, int32_t* layer, LoraTarget* target, bool* is_a);
// llama.cpp's "blk.N.<name>.weight.lora_a" / ".lora_b" (and "token_embd" / "output", layer -1).
bool ParseGgufLoraName(std::string_view name, int32_t* layer, int* target, bool* is_a);
// A 2-D tensor as a factor matrix (rows of whole blocks).
WeightMatrix MatrixView(const TensorInfo& t);
// The metadata of an adapter package (shapes of its base) as (key, value) pairs, in order.
std::vector<std::pair<std::string, int64_t>> AdapterShapeKeys(const ModelConfig& c);
// A layer index of the target: 0 to n_layers - 1 for the layers' projections, -1 for the
// embedding and the output matrix.
bool LayerFits(int32_t layer, int target, int32_t n_layers);
// The PEFT directory's config and weights file of `path` (a directory or its .safetensors).
bool PeftPaths(const std::string& path, std::string* config, std::string* weights);

}  // namespace pocket::adapter_detail
