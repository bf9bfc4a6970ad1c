// A loaded model: config, weights (views into the mapped file), tokenizer and the kernel table.
// Immutable after Load, so one Model is shared by any number of sessions on any threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/status.h"
#include "format/model_source.h"
#include "kernels/kernel_table.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace pocket {

struct LoadOptions {
  // A tokenizer to use instead of the model's own: tokenizer.json, or a llama2.c tokenizer.bin
  // (which llama2.c checkpoints need, having none inside).
  std::string tokenizer_path;
  // Kernels to use; null means the best for this CPU.
  const KernelTable* kernels = nullptr;
  // Repack GGUF Q4_0 / Q4_1 / Q8_0 matrices for the integer kernels (false: dense float path).
  bool repack = true;
  // Huge pages under the weights every decode step streams (see BindOptions).
  bool huge_pages = true;
  Logger logger;
};

class Model {
 public:
  static StatusOr<std::shared_ptr<const Model>> Load(const std::string& path,
                                                     const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const KernelTable& kernels() const { return *kernels_; }
  const ModelSource& source() const { return *source_; }
  // Null when the model has no tokenizer (a llama2.c checkpoint without --tokenizer).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The same, for holders that may outlive the model (a tokenizer mapped from a package keeps
  // the mapping alive).
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  // 1 / base^(2i / head_dim), i < head_dim / 2 (in double: the angle pos * freq is formed in
  // double).
  const std::vector<double>& rope_inv_freq() const { return rope_inv_freq_; }
  // The classification head the file carries (present() false when none): Session::Classify.
  const ClassifierHead& classifier() const { return classifier_; }
  // Token ids that end generation (EOS and end-of-turn tokens).
  const std::vector<int32_t>& stop_token_ids() const { return stop_token_ids_; }
  int64_t load_us() const { return load_us_; }

 private:
  Model() = default;
  std::shared_ptr<const ModelSource> source_;  // shared with a tokenizer used in place
  ModelConfig config_;
  ModelWeights weights_;
  const KernelTable* kernels_ = nullptr;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ClassifierHead classifier_;
  std::vector<double> rope_inv_freq_;
  std::vector<int32_t> stop_token_ids_;
  int64_t load_us_ = 0;
};

// The tokenizer stored in a GGUF file's tokenizer.ggml.* metadata (model "gpt2", pre "qwen2").
StatusOr<std::shared_ptr<const Tokenizer>> TokenizerFromGguf(const GgufFile& gguf);

}  // namespace pocket
