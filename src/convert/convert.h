// `pocket convert`: from what users have (GGUF, Hugging Face directories, llama2.c checkpoints,
// .pocket packages) to a .pocket package holding the weights in the layout the kernels consume,
// the tokenizer, the chat template and the configuration. The output is written to a temporary
// file and renamed at the end; the input is never overwritten.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace pocket {

struct ConvertOptions {
  // Encodings: "int4" (asymmetric 4-bit, searched scales), "int8" (symmetric 8-bit), "f16",
  // "bf16", "f32". `embedding` and `output` default to `weights` ("" = same); a tied model has
  // one matrix for both, encoded as `output`.
  std::string weights = "int4";
  std::string embedding;
  std::string output;
  // Columns per scale group for int4 / int8: 32, 64 or 128. A matrix whose width the group does
  // not divide is stored at the next exact encoding instead (ConvertFallback).
  int32_t group = 64;
  std::string tokenizer_path;  // a tokenizer to use instead of the model's own
  // A classification head to store (model/classifier.h): a .npy or safetensors file holding one
  // matrix [n_labels, d_model] (safetensors: the tensor cls_head.weight, score.weight or the
  // file's only tensor), and the names of its rows, in order. Written as f32. Without one, a
  // head the input carries is kept.
  std::string classifier_head_path;
  std::vector<std::string> classifier_labels;
  // A DFlash block drafter to store in the package (model/dflash.h; docs/format.md, "Block
  // drafter"): its Hugging Face directory, checked against the model being converted before
  // anything is written, and the form of its matrices: "int8" (default), "int4" or "f32" (as the
  // directory stores them). Without one, a drafter the input package carries is kept as it is.
  std::string drafter_dir;
  std::string drafter_weights = "int8";
  // LoRA adapters to bake into the weights ("DIR[:SCALE]", model/adapter.h's formats): each
  // matrix is read as floats, the adapters' s*B*A added (in double), and quantized again with
  // the searched quantizer (codes of a quantized input are then never kept as they are).
  std::vector<std::string> merge_lora;
  // ConvertAdapter: the adapter to package (PEFT directory, llama.cpp GGUF, or a package) and
  // the encoding of its factors: "int8" (default), "f16", "bf16" or "f32".
  std::string lora;
  std::string lora_factors = "int8";
  int32_t n_threads = 0;  // 0: one per hardware thread
  // Called after each tensor is written: `done` of `total` tensors, the last one's name.
  std::function<void(int64_t done, int64_t total, const std::string& tensor)> progress;
  // Polled before each tensor: returning true stops the conversion with a Cancelled status and
  // no output file (the temporary file is removed).
  std::function<bool()> cancelled;
};

struct ConvertGroupReport {
  // "embedding", "output", "attention", "ffn", "norms", "classifier", "drafter"
  std::string group;
  int64_t n_weights = 0;
  uint64_t bytes = 0;
  std::string encoding;
  // Weights whose codes and scales were kept exactly from a quantized input (Q4_0, Q4_1 or Q8_0
  // blocks that map onto the target layout) instead of being quantized again.
  int64_t kept_weights = 0;
  double bits_per_weight() const { return n_weights ? 8.0 * bytes / n_weights : 0.0; }
};

// A matrix stored otherwise than asked because the requested group does not divide its width:
// at the largest smaller group that does (32 or 64), else as f16. (int8 per row would be next,
// but no layout the kernels run has it: packed groups are multiples of 32, and so are Q8_0's
// blocks.)
struct ConvertFallback {
  std::string tensor;     // "blk.0.ffn_down.weight"
  std::string group;      // its tensor group, as in ConvertGroupReport
  std::string requested;  // "int4 g64"
  std::string stored;     // "int4 g32" or "f16"
  std::string reason;     // "172 columns are not a multiple of 32, the smallest group"
};

struct ConvertReport {
  std::vector<ConvertGroupReport> groups;
  std::vector<ConvertFallback> fallbacks;
  uint64_t file_bytes = 0;
  double seconds = 0;
};

// The checks of the options alone (encodings, group, a classifier head and its labels together),
// which ConvertModel also makes: a caller can tell a usage error from a failed conversion.
Status CheckConvertOptions(const ConvertOptions& options);

StatusOr<ConvertReport> ConvertModel(const std::string& input, const std::string& output,
                                     const ConvertOptions& options);

// `pocket convert BASE --lora ADAPTER -o task.pocket`: the adapter, loaded and checked for the
// base `input`, written as pocket's adapter package (model/adapter.h, WriteAdapterPackage) with
// the base's fingerprint. The report has one group, "adapter".
StatusOr<ConvertReport> ConvertAdapter(const std::string& input, const std::string& output,
                                       const ConvertOptions& options);

}  // namespace pocket
