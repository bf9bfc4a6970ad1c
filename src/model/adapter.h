// Task adapters (LoRA): low-rank factors that change what a base model's projections compute,
// y = W·x + s·B(A·x), loaded beside the base without touching it. An adapter is immutable once
// loaded and shared by every session that uses it (std::shared_ptr); a session holds an
// AdapterSet (adapters with the user's scales) and the forward pass adds the low-rank term of
// the set to each projection's product before its epilogue (GemmOut::add), on the packed, fused
// base: the Q/K/V and gate/up matrices get the terms of their parts.
//
// Formats: a PEFT directory (adapter_config.json + adapter_model.safetensors), llama.cpp's
// LoRA GGUF (general.type "adapter"), factors in f32, f16 or bf16, copied out of the mapping at
// load (A as stored, B transposed; the file's pages released); and pocket's adapter package
// (WriteAdapterPackage: A and B transposed, f32, f16, bf16 or Q8_0, both used in place, checked
// against the base's fingerprint). Besides the layers' projections, an adapter may change the
// token embedding (e(t) += s·B·A[:, t]) and the output matrix (logits += s·B(A·norm(h))), on a
// tied base too (the term is added beside the shared matrix). Unsupported variants (DoRA,
// trained biases, modules_to_save) are errors that name the field or tensor.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"
#include "format/pocket_file.h"
#include "format/safetensors.h"
#include "kernels/kernel_table.h"
#include "model/classifier.h"
#include "model/model.h"

namespace pocket {

// The matrices an adapter can change, in the order the forward pass meets them: the first
// kLoraTargets in every layer, then the model's token embedding and output matrix (one each).
enum class LoraTarget : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown, kEmbed, kOutput };
inline constexpr int kLoraTargets = 7;     // per layer
inline constexpr int kLoraAllTargets = 9;  // with the embedding and the output matrix
inline bool IsLayerTarget(LoraTarget t) {
  return static_cast<int>(t) < kLoraTargets;
}
// "q", "k", ..., "down", "embed", "lm_head": the CLI's spelling (make-adapter --targets).
std::string_view LoraTargetName(LoraTarget t);
bool ParseLoraTarget(std::string_view name, LoraTarget* out);
// The Hugging Face module of a target ("self_attn.q_proj", "mlp.down_proj", "embed_tokens",
// "lm_head").
std::string_view LoraTargetModule(LoraTarget t);
// The module's full name in PEFT's rank_pattern / alpha_pattern: "model.layers.N.self_attn.q_proj",
// "model.embed_tokens", "lm_head".
std::string LoraModulePath(int32_t layer, LoraTarget t);

// One projection's factors: A [rank, in] as the file stores it (any type the dense kernels take;
// for the embedding, in = the vocabulary and column t is token t's term),
// B transposed at load into bt [rank, out] (f32, or bf16 when the file holds bf16: the same
// values), so the output step is rank scaled row additions along the outputs instead of one short
// dot per output; and the adapter's own scale (alpha / rank, or alpha / sqrt(rank) for rsLoRA,
// with rank_pattern / alpha_pattern applied).
struct LoraPair {
  WeightMatrix a;
  WeightMatrix bt;
  int32_t rank = 0;
  float scale = 0.0f;
  bool present() const { return a.data != nullptr; }
};

class LoraAdapter {
 public:
  // Loads a PEFT directory (or its adapter_model.safetensors) for `base`: every tensor is bound
  // and checked against the base's shapes. Errors name the file and the tensor or field.
  static StatusOr<std::shared_ptr<const LoraAdapter>> Load(const std::string& path,
                                                           const Model& base);

  // The same from bytes: the adapter_config.json text and the safetensors file's bytes (which
  // must outlive the adapter), for a base of config `base` (the fuzz target's entry).
  static StatusOr<std::shared_ptr<const LoraAdapter>> ParsePeft(const std::string& config_json,
                                                                const uint8_t* safetensors,
                                                                size_t size,
                                                                const ModelConfig& base);

  // pocket's own adapter package from bytes (which must outlive the adapter), for a base of
  // config `base` whose BaseFingerprint is `fingerprint`.
  static StatusOr<std::shared_ptr<const LoraAdapter>> ParsePocket(const uint8_t* data, size_t size,
                                                                  const ModelConfig& base,
                                                                  const std::string& fingerprint);

  // A llama.cpp LoRA GGUF from bytes (which must outlive the adapter).
  static StatusOr<std::shared_ptr<const LoraAdapter>> ParseGguf(const uint8_t* data, size_t size,
                                                                const ModelConfig& base);

  const std::string& path() const { return path_; }
  std::string_view format() const { return format_; }
  int32_t n_layers() const { return static_cast<int32_t>(layers_.size()); }
  // A layer's projection, or (any layer) the embedding's / output matrix's pair.
  const LoraPair& pair(int32_t layer, LoraTarget t) const {
    if (!IsLayerTarget(t)) return globals_[static_cast<size_t>(t) - kLoraTargets];
    return layers_[static_cast<size_t>(layer)][static_cast<size_t>(t)];
  }
  int32_t max_rank() const { return max_rank_; }
  int32_t n_pairs() const { return n_pairs_; }
  // The targets present ("q,k,v,o,gate,up,down,embed,lm_head").
  std::string targets() const;
  // Bytes of the factors (as stored).
  size_t bytes() const { return bytes_; }
  // A classification head the adapter carries (pocket adapter packages: a task = adapter +
  // head); Session::Classify uses it instead of the model's. Empty when none.
  const ClassifierHead& classifier() const { return head_; }

 private:
  LoraAdapter() = default;
  // Binds every (layer, target) pair of A and B tensors: shapes against the base, Q/K row order
  // (hf_order: Hugging Face's; else llama.cpp's GGUF order), B transposed; scale_of gives the
  // pair's scale (or an error naming the tensor).
  static Status BindPairs(
      LoraAdapter* a, const std::map<std::pair<int32_t, int>, const TensorInfo*>& as,
      const std::map<std::pair<int32_t, int>, const TensorInfo*>& bs, const ModelConfig& c,
      const std::string& weights_path, bool owns_mapping, bool hf_order,
      const std::function<StatusOr<float>(int32_t, LoraTarget, int64_t, const TensorInfo*)>&
          scale_of);
  static StatusOr<std::shared_ptr<const LoraAdapter>> FromGguf(std::unique_ptr<GgufFile> gguf,
                                                               const std::string& path,
                                                               const ModelConfig& c,
                                                               bool owns_mapping);
  static StatusOr<std::shared_ptr<const LoraAdapter>> FromPocket(std::unique_ptr<PocketFile> file,
                                                                 const std::string& path,
                                                                 const ModelConfig& c,
                                                                 const std::string& fingerprint);
  static StatusOr<std::shared_ptr<const LoraAdapter>> FromPeft(
      const std::string& config_text, const std::string& config_path,
      std::unique_ptr<SafetensorsFile> file, const std::string& weights_path,
      const std::string& path, const ModelConfig& c, bool owns_mapping);
  // A package's factors (used in place before) copied into one buffer of the adapter's own, in
  // the order a forward pass reads them (layer by layer, each term's A factors then its B^T),
  // B^T in Q8_0 blocked (WeightMatrix::block_stride), whole huge pages advised, and the file
  // dropped. Decode reads every factor once per token: a thread's share of a B^T is then one
  // stream instead of a short one per rank row, and the factors sit in a few huge pages instead
  // of the file's 4 KB pages. (PEFT and GGUF adapters are already copied and converted at bind.)
  Status GatherFactors();
  std::string path_;
  std::string format_;
  LoraPair& mutable_pair(int32_t layer, LoraTarget t) {
    return const_cast<LoraPair&>(pair(layer, t));
  }
  std::vector<std::array<LoraPair, kLoraTargets>> layers_;
  std::array<LoraPair, kLoraAllTargets - kLoraTargets> globals_;  // embedding, output
  int32_t max_rank_ = 0;
  int32_t n_pairs_ = 0;
  size_t bytes_ = 0;
  ClassifierHead head_;
  std::shared_ptr<const void> storage_;            // the mapped file the A factors live in
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // factors copied at load
};

// Row r of a factor as floats (cols values), whatever its layout (a B^T stored blocked too).
void DequantizeFactorRow(const WeightMatrix& m, int64_t r, float* out);
// The bytes a factor's values take (rows of whole blocks, blocked or not).
inline size_t FactorBytes(const WeightMatrix& m) {
  return m.block_stride != 0 ? m.block_stride * static_cast<size_t>(m.cols / 32)
                             : m.row_bytes * static_cast<size_t>(m.rows);
}

// An adapter in use, with the user's scale (multiplies the adapter's own).
struct AdapterUse {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 1.0f;
};
// The adapters a session applies, all at once (their terms add up).
using AdapterSet = std::vector<AdapterUse>;

// Two sets compute the same (the same adapters, in the same order, with the same scales).
bool SameAdapters(const AdapterSet& a, const AdapterSet& b);
// Floats of the rank-sized intermediate the forward pass needs per row for `set`: the largest,
// over the matrices (the embedding and the output matrix too), of the sum of the ranks of every
// part (Q, K and V count together).
int64_t AdapterMidFloats(const AdapterSet& set);
// "a.lora:0.5,b" for messages and --json.
std::string AdapterSetName(const AdapterSet& set);

// A synthetic adapter in PEFT's layout (pocket make-adapter): for every layer and projection
// target (and once for embed / lm_head), lora_A [rank, in] uniform in +-1/sqrt(in) (+-1 for the
// embedding, whose input is one-hot) and lora_B [out, rank] uniform in +-init/sqrt(rank) (PEFT
// starts B at zero; a test needs a term that changes the output), deterministic for a seed.
struct SyntheticAdapterOptions {
  ModelConfig base;
  int32_t rank = 16;
  double alpha = 32.0;
  bool rslora = false;
  std::vector<LoraTarget> targets;
  // Layers whose rank differs (written as rank_pattern, "model.layers.N.<module>").
  std::vector<std::pair<int32_t, int32_t>> layer_ranks;  // (layer, rank)
  DType type = DType::kF32;                              // f32, f16 or bf16
  float init = 0.5f;
  uint64_t seed = 1;
  std::vector<std::string> input_paths;  // never overwritten
};
// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (DIR must exist).
Status WriteSyntheticAdapter(const SyntheticAdapterOptions& o, const std::string& dir);

// A base model's fingerprint, stored in adapter packages and checked when one is loaded: 16 hex
// digits, CRC-32C of its architecture and shapes and of its norm weights (f32 in every format,
// and changed by any training), so the same base in GGUF, safetensors or .pocket form matches and
// another model or fine-tune of the same shape does not.
std::string BaseFingerprint(const Model& base);

// pocket's adapter package (docs/format.md, "Adapter packages"): the factors of an adapter loaded
// for `base`, A [rank, in] and B transposed [rank, out], in `factors` encoding ("int8": Q8_0
// blocks, a row whose width 32 does not divide as f16; "f16", "bf16" or "f32"), the pairs' scales,
// the base's shapes and fingerprint; checksummed sections, written to a temporary file renamed at
// the end (never over one of `inputs`).
struct AdapterPackageOptions {
  std::string factors = "int8";
  ClassifierHead head;      // stored (f32) with its labels when present
  std::string source_path;  // recorded in the metadata
  std::vector<std::string> inputs;
};
struct AdapterPackageReport {
  int32_t n_pairs = 0;
  uint64_t file_bytes = 0;
  int32_t f16_fallbacks = 0;  // int8 factors whose width 32 does not divide
};
StatusOr<AdapterPackageReport> WriteAdapterPackage(const LoraAdapter& adapter, const Model& base,
                                                   const AdapterPackageOptions& o,
                                                   const std::string& out);
inline constexpr std::string_view kAdapterPackageKind = "lora_adapter";

// What an adapter file holds, read without a base model (pocket info): its format, factors and
// hyperparameters. Nothing is checked against a model here (LoraAdapter::Load does that).
struct AdapterFileInfo {
  std::string path;
  std::string format;        // "peft" or "gguf"
  std::string architecture;  // GGUF general.architecture, PEFT base_model_name_or_path ("" none)
  int64_t n_tensors = 0;
  int32_t n_pairs = 0;   // (layer, target) pairs with an A factor
  int32_t n_layers = 0;  // the largest layer index + 1
  std::string targets;   // "q,k,v,o,gate,up,down,embed,lm_head" (those present)
  int32_t min_rank = 0, max_rank = 0;
  double alpha = -1;  // lora_alpha / adapter.lora.alpha; -1 when the file gives none
  bool rslora = false;
  std::map<std::string, int64_t> tensors_by_type;  // "bf16" -> count
  uint64_t factor_bytes = 0;
  uint64_t file_bytes = 0;
};
// True when `path` looks like an adapter: a directory with adapter_config.json, a .safetensors
// beside one, or a GGUF whose general.type is "adapter".
bool LooksLikeAdapter(const std::string& path);
StatusOr<AdapterFileInfo> DescribeAdapterFile(const std::string& path);

// "FILE" or "FILE:SCALE" (the CLI's --lora argument); the scale defaults to 1.
Status ParseAdapterArg(std::string_view arg, std::string* path, float* scale);

}  // namespace pocket
