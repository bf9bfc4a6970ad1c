// Synthetic models: random weights (deterministic per seed and tensor name) at the real shapes of
// the models we target, written as GGUF or as a Hugging Face directory. Tests and benchmarks use
// them because real weights cannot be downloaded where the project is built.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "quant/dtype.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

// "pocket-0.3b" (MNN-Pocket-0.3B), "qwen3-0.6b", "tiny" (2 layers; every feature, small).
StatusOr<ModelConfig> PresetConfig(const std::string& preset, Architecture arch);
std::vector<std::string> PresetNames();

struct SyntheticOptions {
  ModelConfig config;
  uint64_t seed = 1;
  DType weight_type = DType::kF32;  // matrices; norms and biases stay f32 in GGUF
  // With Q4_1: columns per quantization grid, as a quantization-aware-trained export (one scale
  // and zero point per grid, repeated in its blocks); 32 is plain Q4_1.
  int32_t q4_1_grid = 32;
  // Attached tokenizer (its vocabulary is fitted to config.vocab_size); may be null.
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string chat_template;  // overrides the tokenizer's
  // Non-empty: a random classification head cls_head.weight [n_labels, d_model] (f32) scoring
  // these labels (GGUF only; model/classifier.h).
  std::vector<std::string> classifier_labels;
  std::vector<std::string> input_paths;  // files the output must never overwrite
};

// Writes a GGUF file. For llama the Q/K rows are permuted as llama.cpp's converter does, so the
// file uses interleaved RoPE and gives the same logits as the Hugging Face copy.
Status WriteSyntheticGguf(const SyntheticOptions& options, const std::string& path);
// Writes a Hugging Face directory (config.json, model.safetensors, tokenizer.json when a
// tokenizer is attached). weight_type must be f32, f16 or bf16.
Status WriteSyntheticHf(const SyntheticOptions& options, const std::string& dir);

// The f32 value of every element of a synthetic tensor (Hugging Face layout), for tests.
std::vector<float> SyntheticTensor(const std::string& canonical_name, std::vector<int64_t> shape,
                                   uint64_t seed);

}  // namespace pocket
