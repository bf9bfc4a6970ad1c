// The model's hyper-parameters, parsed once from whatever file the user has into one typed struct
// and validated once. Everything downstream reads this struct, never file metadata.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace pocket {

class GgufFile;
class HfDirectory;
class PocketFile;
struct Llama2cHeader;

enum class Architecture { kLlama, kQwen2, kQwen3 };
std::string_view ArchitectureName(Architecture arch);
bool ParseArchitecture(std::string_view name, Architecture* out);

// Which elements RoPE rotates together within a head.
enum class RopeStyle {
  kInterleaved,  // (x[2i], x[2i+1]): GGUF llama (its converter permutes Q/K), llama2.c
  kNeox,         // (x[i], x[i + head_dim/2]), "rotate half": Hugging Face, GGUF qwen2/qwen3
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  int32_t n_layers = 0;
  int32_t d_model = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t d_ff = 0;
  int32_t vocab_size = 0;
  int32_t n_ctx_train = 0;  // the context length the model was trained for
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kNeox;
  bool qk_norm = false;      // qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;     // qwen2: biases on the q, k, v projections
  bool tied_output = false;  // logits use the token embedding matrix

  int64_t q_dim() const { return int64_t{n_heads} * head_dim; }
  int64_t kv_dim() const { return int64_t{n_kv_heads} * head_dim; }
  int32_t gqa_group() const { return n_heads / n_kv_heads; }

  // Checks every field for sense (positive, divisible, within limits); messages name the field.
  Status Validate() const;
  std::string ToString() const;
};

// Builders, one per source format; the metadata key names live in config.cc's tables.
StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& gguf);
StatusOr<ModelConfig> ConfigFromHf(const HfDirectory& hf);
StatusOr<ModelConfig> ConfigFromLlama2c(const Llama2cHeader& header);
StatusOr<ModelConfig> ConfigFromPocket(const PocketFile& pocket);

}  // namespace pocket
